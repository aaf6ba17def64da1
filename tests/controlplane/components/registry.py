"""The CNCF distribution registry: a real OCI 1.1 registry for the export tests and the demo.

Built from ``modules/registry`` (a ``tool`` directive naming upstream's
``github.com/distribution/distribution/v3/cmd/registry``, v3.1.2: it serves the
OCI 1.1 referrers API, ``GET /v2/<name>/referrers/<digest>``). :meth:`Registry.start`
runs it on 127.0.0.1 with

- **TLS** from the cluster CA (a serving certificate with the IP SAN
  127.0.0.1): clients verify it with the cluster's ``ca.crt``, never with
  verification off;
- **htpasswd auth**: the registry's own provisioning (upstream
  ``registry/auth/htpasswd``: a missing file is created with user ``docker``
  and a random bcrypt'd password, logged once); the password is read from
  that log line, so no bcrypt code of ours is needed;
- filesystem storage under the component's folder, deletes disabled (what
  we push is never deleted by anyone but an operator).

It needs no ServiceAccount: it talks to no API server. ``registry.url``
(``https://127.0.0.1:<port>``), ``host`` (``127.0.0.1:<port>``), ``username``,
``password``, ``ca_file`` and :meth:`dockerconfigjson` are what a test or the
demo hands to the annotator. :meth:`stop`/:meth:`start` keep the storage, so
a test can take the registry down and bring it back with its content.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, ClassVar, Final

from tests.controlplane.component import Component, register
from tests.controlplane.gobuild import GoBuild, ensure, go_ldflags, module_dir
from tests.controlplane.process import free_ports

#: The distribution release (modules/registry/go.mod).
VERSION: Final = "v3.1.2"
MAIN: Final = "github.com/distribution/distribution/v3/cmd/registry"
#: The user upstream's htpasswd provisioning creates.
USERNAME: Final = "docker"

BUILD: Final = GoBuild(
    name="registry",
    version=VERSION,
    mains={"registry": MAIN},
    module=module_dir("registry"),
    # upstream's Makefile sets the same variable (version.version) from git.
    ldflags=go_ldflags({"github.com/distribution/distribution/v3/version": {"version": VERSION}}),
    check=("registry", ("--version",), VERSION),
    verify=True,
    estimate="about 3 min",
)

_PASSWORD = re.compile(r'password"?[=:]\s*"?([A-Za-z0-9_-]{20,})')


@register
class Registry(Component):
    name: ClassVar[str] = "registry"
    summary: ClassVar[str] = f"CNCF distribution registry {VERSION} (TLS, htpasswd)"

    port = 0
    debug_port = 0
    password = ""
    log_file = Path()  # its log (kept across stop and start: the access log of every run)

    @classmethod
    def build(cls) -> None:
        ensure(BUILD)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"https://{self.host}"

    @property
    def ca_file(self) -> Path:
        return self.plane.ca_file

    @property
    def username(self) -> str:
        return USERNAME

    def start(self) -> None:
        began = self.began()
        if not self.port:  # a restart keeps its address, storage and password
            self.port, self.debug_port = free_ports(2)
            self._serving = self.plane.issue_serving_cert("registry")
        config = self.work_dir / "config.yml"
        config.write_text(json.dumps(self._config(), indent=2) + "\n")  # YAML is a JSON superset
        proc = self.spawn(
            "registry", [str(ensure(BUILD) / "bin" / "registry"), "serve", str(config)]
        )
        self.log_file = proc.log_path
        self.wait("/v2/ with its password", self._ready)
        self.ready_after(began)

    def _config(self) -> dict[str, Any]:
        return {
            "version": 0.1,
            "log": {"level": "info", "formatter": "text"},
            "storage": {
                "filesystem": {"rootdirectory": str(self.work_dir / "storage")},
                "delete": {"enabled": False},
            },
            "http": {
                "addr": self.host,
                "tls": {
                    "certificate": str(self._serving.cert_file),
                    "key": str(self._serving.key_file),
                },
                "debug": {"addr": f"127.0.0.1:{self.debug_port}"},
            },
            "auth": {"htpasswd": {"realm": "aibom-test", "path": str(self.work_dir / "htpasswd")}},
        }

    def _ready(self) -> bool:
        if not self.password:
            found = _PASSWORD.search(self.log_path.read_text(errors="replace"))
            if found is None:
                return False
            self.password = found.group(1)
        return self.get("/v2/")[0] == 200

    # ---------------------------------------------------------------- clients
    def authorization(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return f"Basic {token}"

    def dockerconfigjson(self, *hosts: str) -> str:
        """A ``kubernetes.io/dockerconfigjson`` Secret's ``.dockerconfigjson`` for it (and
        for `hosts` in front of it, such as a test's proxy)."""
        auth = self.authorization().removeprefix("Basic ")
        return json.dumps({"auths": {h: {"auth": auth} for h in (self.host, *hosts)}})

    def get(self, path: str, *, accept: str = "") -> tuple[int, bytes, dict[str, str]]:
        """One authenticated GET (TLS verified against the cluster CA)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        headers = {"Authorization": self.authorization()}
        if accept:
            headers["Accept"] = accept
        req = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.urlopen(req, context=context, timeout=10) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)
        except OSError:
            return 0, b"", {}

    def info(self) -> dict[str, Any]:
        return super().info() | {
            "url": self.url,
            "username": self.username,
            "password": self.password,
            "ca_file": str(self.ca_file),
        }
