"""Fixtures for tests that run against the real control plane (tests/controlplane).

- ``control_plane`` (session): a started :class:`tests.controlplane.ControlPlane`
  with the CRDs of ``DEFAULT_CRD_FILES`` installed and Established.
- ``kubectl`` (session): ``kubectl("get", "pods", "-n", ns)`` runs the
  version-matched kubectl with the admin kubeconfig (``kubeconfig=`` for
  another identity); it raises on a non-zero exit unless ``check=False``.
- ``namespace`` (function): a fresh namespace whose default ServiceAccount
  exists; deleted (without waiting) after the test.

The binaries are built, if not cached, once the tests are collected, before
the first test starts (a cold build takes 10-20 min and must not count against
a test's timeout). If they cannot be built, every integration test FAILS with
the build error: nothing is skipped.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
import pytest

from tests.controlplane import ControlPlane, ControlPlaneError, Kubectl, ensure_binaries

_BUILD_ERROR: list[BaseException] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: needs the real control plane (tests/controlplane)"
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.get_closest_marker("integration") for item in session.items):
        try:
            ensure_binaries()
        except Exception as exc:  # reported by the control_plane fixture, loudly
            _BUILD_ERROR.append(exc)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    if _BUILD_ERROR:
        pytest.fail(f"cannot build the control-plane binaries: {_BUILD_ERROR[0]}", pytrace=False)
    try:
        cp = ControlPlane().start()
    except ControlPlaneError as exc:
        pytest.fail(f"cannot start the control plane: {exc}", pytrace=False)
    try:
        cp.install_crds()
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> Kubectl:
    return control_plane.kubectl


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base or 'test'}-{uuid.uuid4().hex[:6]}"
    resp = control_plane.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    assert resp.status == 201, resp.body
    # Pods are refused until the serviceaccount controller made "default".
    deadline = time.monotonic() + 30
    while control_plane.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").status != 200:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {name} after 30 s"
        time.sleep(0.1)
    yield name
    control_plane.request("DELETE", f"/api/v1/namespaces/{name}")
