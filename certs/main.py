"""Generate a CA and the webhook's serving certificate; fill in the webhook configuration.

Writes, in --out-dir: ca.crt, ca.key (kept to re-issue: a new serving
certificate under the same CA keeps the caBundle, so rotation needs no
configuration change), tls.crt, tls.key (mode 0600), and mutatingwebhook.yaml
(the webhook configuration with the caBundle and clientConfig filled in,
unless --no-config); once, never replaced: provenance.key (the webhook's
edge-proof key) and signing.key (the annotator's Ed25519 document-signing
key: a default install signs every AIBOM, docs/signing.md). Prints the
caBundle (base64 of ca.crt) on stdout.

The serving certificate's SANs: the Service's DNS names
(<service>, <service>.<ns>, <service>.<ns>.svc, <service>.<ns>.svc.cluster.local),
every --dns and every --ip (the API server dials an IP for
`--url https://127.0.0.1:PORT/mutate`, and refuses a certificate without it).

Example (a local API server calling a webhook on this machine):
  aibom-rollup certs --out-dir /tmp/hook --ip 127.0.0.1 --url https://127.0.0.1:8443/mutate
  kubectl apply -f /tmp/hook/mutatingwebhook.yaml
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from urllib.parse import urlsplit

from aibom_core import jsf
from aibom_edge.files import write_atomic
from aibom_edge.options import UsageError
from certs.pki import (
    KeyPair,
    PkiError,
    issue_serving,
    load_pair,
    new_ca,
    new_key_text,
    service_dns_names,
)
from certs.webhookconfig import DEFAULT_NAMESPACE, ConfigError, ca_bundle, fill

# The shipped webhook configuration, packaged with the command so `certs` works
# from an installed package or the image too: a symbolic link to
# manifests/webhook/mutatingwebhook.yaml (kustomize cannot read outside its
# folder, so the file lives there; building the package copies its content).
DEFAULT_TEMPLATE = Path(__file__).resolve().parent / "templates" / "mutatingwebhook.yaml"


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--out-dir", required=True, metavar="DIR", help="where the files go")
    p.add_argument("--service", default="aibom-rollup-webhook", help="the webhook's Service name")
    p.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help="the webhook's namespace (also excluded from its namespaceSelector)",
    )
    p.add_argument(
        "--ip",
        action="append",
        default=[],
        metavar="IP",
        help="an IP SAN (repeatable), e.g. 127.0.0.1 for a webhook on this machine",
    )
    p.add_argument(
        "--dns", action="append", default=[], metavar="NAME", help="an extra DNS SAN (repeatable)"
    )
    p.add_argument(
        "--days", type=int, default=365, help="serving certificate validity (default 365)"
    )
    p.add_argument("--ca-days", type=int, default=3650, help="CA validity (default 3650)")
    p.add_argument(
        "--new-ca",
        action="store_true",
        help="make a new CA even if DIR/ca.crt and ca.key exist (changes the caBundle)",
    )
    cfg = p.add_mutually_exclusive_group()
    cfg.add_argument(
        "--url",
        metavar="URL",
        help="clientConfig.url instead of the Service, e.g. https://127.0.0.1:8443/mutate",
    )
    cfg.add_argument(
        "--no-config", action="store_true", help="do not write the webhook configuration"
    )
    p.add_argument(
        "--webhook-config",
        metavar="FILE",
        help="the manifest to fill in (default: the packaged copy of "
        "manifests/webhook/mutatingwebhook.yaml)",
    )
    p.add_argument(
        "--config-out",
        metavar="FILE",
        help="where the filled-in configuration goes (default DIR/mutatingwebhook.yaml; "
        "- for stdout, then the caBundle is not printed)",
    )


def _ca(out: Path, *, new: bool, now: dt.datetime, days: int) -> tuple[KeyPair, bool]:
    crt, key = out / "ca.crt", out / "ca.key"
    if not new and crt.exists() and key.exists():
        try:
            return load_pair(crt.read_bytes(), key.read_bytes()), False
        except (ValueError, PkiError) as exc:
            raise UsageError(f"{out}: cannot reuse the CA ({exc}); pass --new-ca") from None
    return new_ca(common_name="aibom-rollup webhook CA", now=now, days=days), True


def run(args: argparse.Namespace) -> int:
    if args.days < 1 or args.ca_days < 1:
        raise UsageError("--days and --ca-days must be at least 1")
    if args.url:
        parts = urlsplit(args.url)
        if parts.scheme != "https" or not parts.hostname:
            raise UsageError(f"--url must be https://HOST[:PORT]/PATH, got {args.url!r}")
    out = Path(args.out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out-dir {out}: {exc.strerror or exc}") from None
    template = Path(args.webhook_config) if args.webhook_config else DEFAULT_TEMPLATE
    text = None
    if not args.no_config:
        try:
            text = template.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(
                f"webhook configuration template {template}: {exc.strerror or exc} "
                "(pass --webhook-config FILE, or --no-config)"
            ) from None
    now = dt.datetime.now(dt.UTC)
    ca, made = _ca(out, new=args.new_ca, now=now, days=args.ca_days)
    try:
        serving = issue_serving(
            ca,
            dns_names=[*service_dns_names(args.service, args.namespace), *args.dns],
            ips=list(args.ip),
            now=now,
            days=args.days,
        )
    except PkiError as exc:
        raise UsageError(str(exc)) from None
    config = None
    if text is not None:
        try:
            config = fill(
                text,
                ca_pem=ca.cert_pem,
                service=args.service,
                namespace=args.namespace,
                url=args.url,
                source=str(template),
            )
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    if made:
        write_atomic(out / "ca.key", ca.key_pem, mode=0o600)
        write_atomic(out / "ca.crt", ca.cert_pem, mode=0o644)
    # Key before certificate: a webhook watching the files never sees a new
    # certificate next to the old key for longer than it takes to write one.
    write_atomic(out / "tls.key", serving.key_pem, mode=0o600)
    write_atomic(out / "tls.crt", serving.cert_pem, mode=0o644)
    written = ["ca.crt", "tls.crt", "tls.key"] + (["ca.key"] if made else [])
    # The edge-proof key: made once, never replaced (a new key
    # would invalidate every proof already written).
    if not (out / "provenance.key").exists():
        write_atomic(out / "provenance.key", new_key_text(), mode=0o600)
        written.append("provenance.key")
    # The document-signing key (docs/signing.md): Ed25519, made once, never
    # replaced here (a rotation is `aibom-rollup keys new`: the annotator then
    # publishes the new key beside the old). Its key id is its RFC 7638
    # thumbprint. The kustomize base puts it in the Secret the annotator signs with.
    if not (out / "signing.key").exists():
        write_atomic(out / "signing.key", jsf.private_pem(jsf.generate()), mode=0o600)
        written.append("signing.key")
    if config is not None:
        if args.config_out == "-":
            sys.stdout.write(config)
            return 0
        target = Path(args.config_out) if args.config_out else out / "mutatingwebhook.yaml"
        write_atomic(target, config.encode(), mode=0o644)
        written.append(str(target))
    print(ca_bundle(ca.cert_pem))
    print(
        f"{'new' if made else 'reused'} CA; wrote {', '.join(written)} in {out}",
        file=sys.stderr,
    )
    return 0
