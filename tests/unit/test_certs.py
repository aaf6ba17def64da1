"""`aibom-rollup certs`: CA + serving certificate with SANs, caBundle, filled-in configuration."""

from __future__ import annotations

import base64
import contextlib
import ssl
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from aibom_rollup.cli import main
from certs.webhookconfig import ConfigError, fill
from tests.unit.clihelp import help_of

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "manifests/webhook/mutatingwebhook.yaml"


def _sans(path: Path) -> tuple[list[str], list[str]]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), [
        str(ip) for ip in ext.get_values_for_type(x509.IPAddress)
    ]


def test_certs_for_a_service(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["certs", "--out-dir", str(tmp_path), "--service", "hook", "--namespace", "sys"])
    assert code == 0
    bundle = capsys.readouterr().out.strip()
    assert base64.b64decode(bundle) == (tmp_path / "ca.crt").read_bytes()
    dns, ips = _sans(tmp_path / "tls.crt")
    assert dns == ["hook", "hook.sys", "hook.sys.svc", "hook.sys.svc.cluster.local"]
    assert ips == []
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600
    config = yaml.safe_load((tmp_path / "mutatingwebhook.yaml").read_text())
    assert config["kind"] == "MutatingWebhookConfiguration"
    for hook in config["webhooks"]:
        assert hook["clientConfig"] == {
            "service": {"name": "hook", "namespace": "sys", "path": "/mutate", "port": 443},
            "caBundle": bundle,
        }
        excluded = hook["namespaceSelector"]["matchExpressions"][1]["values"]
        assert excluded == ["kube-system", "sys"]  # its own namespace, not aibom-system


def test_certs_for_a_url_with_ip_sans_verify_with_a_real_tls_handshake(tmp_path: Path) -> None:
    url = "https://127.0.0.1:9443/mutate"
    assert main(["certs", "--out-dir", str(tmp_path), "--ip", "127.0.0.1", "--url", url]) == 0
    _, ips = _sans(tmp_path / "tls.crt")
    assert ips == ["127.0.0.1"]
    config = yaml.safe_load((tmp_path / "mutatingwebhook.yaml").read_text())
    assert {h["clientConfig"]["url"] for h in config["webhooks"]} == {url}
    # The chain verifies for the IP, as the API server will check it.
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    cli = client.wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (cli, srv):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    assert cli.version() in ("TLSv1.2", "TLSv1.3")


def test_rerun_reuses_the_ca_so_the_ca_bundle_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["certs", "--out-dir", str(tmp_path), "--no-config"])
    first, cert1 = capsys.readouterr().out, (tmp_path / "tls.crt").read_bytes()
    main(["certs", "--out-dir", str(tmp_path), "--no-config"])
    assert capsys.readouterr().out == first
    assert (tmp_path / "tls.crt").read_bytes() != cert1
    main(["certs", "--out-dir", str(tmp_path), "--no-config", "--new-ca"])
    assert capsys.readouterr().out != first


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ip", "not-an-ip"], "not an IP address"),
        (["--url", "http://127.0.0.1/mutate"], "--url must be https"),
        (["--webhook-config", "/nonexistent.yaml"], "webhook configuration template"),
        (["--days", "0"], "--days"),
    ],
)
def test_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["certs", "--out-dir", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err


def test_fill_refuses_a_file_without_a_webhook_configuration() -> None:
    with pytest.raises(ConfigError, match="no MutatingWebhookConfiguration"):
        fill("kind: ConfigMap\n", ca_pem=b"x", service="s", namespace="n")


def test_help_lists_the_flags() -> None:
    out = help_of("certs")
    for flag in ("--out-dir", "--service", "--namespace", "--ip", "--url", "--webhook-config"):
        assert flag in out


def test_packaged_template_is_the_shipped_manifest() -> None:
    from certs.main import DEFAULT_TEMPLATE

    shipped = Path(__file__).resolve().parents[2] / "manifests/webhook/mutatingwebhook.yaml"
    assert DEFAULT_TEMPLATE.read_text() == shipped.read_text(), (
        "certs/templates/mutatingwebhook.yaml must be a copy of "
        "manifests/webhook/mutatingwebhook.yaml: copy it over after editing the manifest"
    )
