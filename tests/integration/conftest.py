"""Fixtures for tests that run against the real control plane (tests/controlplane).

Stable names, shared by every module in tests/integration/ (one control plane
per pytest session):

- ``control_plane`` (session): a started :class:`tests.controlplane.ControlPlane`
  with the CRDs of ``DEFAULT_CRD_FILES`` installed and Established. Its API is
  in the ``tests.controlplane`` module docstring; the most used parts:
  ``cp.server``, ``cp.kubeconfig`` (= ``cp.admin_kubeconfig``), ``cp.ca_file``,
  ``cp.admin_cert_file`` / ``cp.admin_key_file``, ``cp.ca_bundle``,
  ``cp.request(method, path, body, identity=...)``,
  ``cp.restricted_kubeconfig(user, groups)``, ``cp.issue_serving_cert(name)``,
  ``cp.install_crd(path)`` / ``cp.delete_crd(name)``, and ``child_env()`` for
  the environment of processes you start against it.
- ``kubectl`` (session): ``kubectl("get", "pods", "-n", ns)`` runs the
  version-matched kubectl with the admin kubeconfig (``kubeconfig=`` for
  another identity, ``input=`` for stdin); it raises ``ControlPlaneError`` on
  a non-zero exit unless ``check=False``. Returns ``CompletedProcess[str]``.
- ``namespace`` (function): a fresh namespace, named after the test, whose
  default ServiceAccount exists; deleted (without waiting) after the test.
- ``components`` (module): the real components a module names with
  ``pytestmark = pytest.mark.components("lws", ...)`` (tests/controlplane/
  components/: operators, engines, registries), started on ``control_plane``
  for the tests of that module as their own ServiceAccounts with their
  releases' RBAC, and stopped after it (their webhook configurations deleted)
  so that other modules can play their children by hand (with what they
  ``require``d: ``kwok`` starts ``kube-scheduler``). A mapping from name
  to the running :class:`tests.controlplane.Component`. Their builds are
  cached like the control plane's and made before the first test.

For the annotator's tests (a module that needs other ones defines its own
fixture of the same name, which pytest prefers):

- ``annotator_identity`` (module): a kubeconfig for the user ``aibom-annotator``
  bound to the shipped ClusterRole.
- ``ns`` (function): ``namespace``, opted in for the annotator (its
  ``LABEL_KEY`` label) and with the Lease ``aibom-test`` granted.
- ``start`` (function): ``start(*args, kubeconfig=, ident=, wait=True)`` starts
  an :class:`tests.integration.support.Annotator` for ``ns`` (references taken
  as written) and, by default, waits until it is ready and leading; every one
  is stopped (SIGTERM, exit 0) after the test.
- ``annotator`` (function): ``start()``.

For the webhook's tests:

- ``start_webhook`` (module): ``start_webhook(user=, name=, selector=, args=)``
  starts the webhook as shipped (``support.running_webhook``: the shipped
  ClusterRole bound to ``user``, its configuration ``name`` for the namespaces
  labelled ``selector``) and returns it; every one is unregistered and
  stopped after the module. A module's ``webhook`` fixture calls it.

For real operators' chains (``tests/integration/chains.py``):

- ``provenance_guard`` (module): the shipped guard (``manifests/provenance``)
  applied for the module, removed after it.
- ``spaces`` (function): a guarded and an unguarded opted-in namespace, a
  Pod-only tenant in each and one annotator for both
  (``chains.operator_namespaces``); needs the module's ``webhook`` fixture and
  the ``kwok`` component (its Stages write the Pods' statuses).

Helpers (waiting, objects, the webhook and annotator processes) are in
``tests/integration/support.py``.

Mark such tests ``@pytest.mark.integration``. The binaries are built, if not
cached, once the tests are collected, before the first test starts (a cold
build takes about 7 minutes on 2 cores and must not count against a test's
timeout). If they cannot be built, every test using the fixtures FAILS with
the build error: nothing is skipped. Whatever happens (failure, Ctrl-C,
SIGKILL of pytest), the control plane's processes are stopped.
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.controlplane import (
    BuildError,
    Component,
    ControlPlane,
    ControlPlaneError,
    Kubectl,
    SourceMissing,
)
from tests.controlplane.__main__ import build_all
from tests.controlplane.gotools import ensure_tool
from tests.integration.chains import Spaces, guard_applied, operator_namespaces
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    StartAnnotator,
    StartWebhook,
    Webhook,
    grant_annotator,
    grant_lease,
    new_namespace,
    running_webhook,
)

_BUILD_ERROR: list[BaseException] = []
#: What the collected tests need that could not be built, by component or tool name.
_UNBUILT: dict[str, BuildError] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: needs the real control plane (tests/controlplane)"
    )
    config.addinivalue_line(
        "markers", "gotools(*names): Go tools (helm, promtool) built before the first test"
    )
    config.addinivalue_line(
        "markers",
        "components(*names): real components (tests/controlplane/components) the module's"
        " `components` fixture starts; built before the first test",
    )
    # SIGTERM (a CI timeout, `kill`) would end pytest without running any
    # teardown; as KeyboardInterrupt, the fixtures stop the control plane.
    # (SIGKILL is covered too: the children get PR_SET_PDEATHSIG=SIGKILL.)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


#: The collection order of the integration files: these first, in this order, then
#: the others by name. pytest-xdist (--dist loadfile) hands the files out by their
#: number of tests, most first, and in this order among files with as many tests.
#: Measured (BENCHMARKS.md, "make test"): the order among files with as many tests
#: moved the integration phase by 321 s (700 s in this order, 1,021 s in name order,
#: the same code); strictly longest first (--no-loadscope-reorder) took 1,022 s.
LONGEST_FIRST = (
    "test_annotator_faults.py",
    "test_annotator.py",
    "test_export.py",
    "test_kubectl_aibom.py",
    "test_demo.py",
    "test_nim_operator.py",
    "test_provenance_attacks.py",
    "test_dynamo.py",
    "test_annotator_oidc.py",
    "test_grove.py",
    "test_guard.py",
    "test_kyverno.py",
    "test_lws.py",
    "test_provenance.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first (:data:`LONGEST_FIRST`), each file's tests in their order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def _marked(session: pytest.Session, marker: str) -> list[str]:
    names: list[str] = []
    for item in session.items:
        for mark in item.iter_markers(marker):
            names += [str(n) for n in mark.args if n not in names]
    return names


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build what the collected tests need before the first one starts: a cold build
    takes minutes and must not count against a test's timeout. A failure is not
    raised here: the control plane's fails every test (`control_plane`), a
    component's or tool's only the modules that name it (`_built`)."""
    if not any(item.get_closest_marker("integration") for item in session.items):
        return
    try:
        _UNBUILT.update(build_all(_marked(session, "components")))
    except Exception as exc:
        _BUILD_ERROR.append(exc)
        return
    for name in _marked(session, "gotools"):
        try:
            ensure_tool(name)
        except BuildError as exc:
            _UNBUILT[name] = exc


@pytest.fixture(scope="module", autouse=True)
def _built(request: pytest.FixtureRequest) -> None:
    """A module that names a component or tool that was not built: skipped when its
    source tree is not on this machine (the reason says which and how to point to
    one), failed when its build broke."""
    for marker in ("components", "gotools"):
        for mark in request.node.iter_markers(marker):
            for name in map(str, mark.args):
                exc = _UNBUILT.get(name)
                if isinstance(exc, SourceMissing):
                    pytest.skip(f"{name} is not built here: {exc}")
                if exc is not None:
                    pytest.fail(f"cannot build {name}: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    if _BUILD_ERROR:
        pytest.fail(f"cannot build what the tests need: {_BUILD_ERROR[0]}", pytrace=False)
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
    name = new_namespace(control_plane, base or "test")
    yield name
    control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture(scope="module")
def components(
    control_plane: ControlPlane, request: pytest.FixtureRequest
) -> Iterator[dict[str, Component]]:
    names = [str(n) for mark in request.node.iter_markers("components") for n in mark.args]
    before = set(control_plane.running_components)
    started: dict[str, Component] = {}
    try:
        for name in names:
            try:
                started[name] = control_plane.start_component(name)
            except ControlPlaneError as exc:
                pytest.fail(f"cannot start the component {name}: {exc}", pytrace=False)
        yield started
    finally:
        # What the module started, what they required included (kwok's kube-scheduler
        # would otherwise go on binding the Pods of the next modules), last first.
        for name in reversed(control_plane.running_components):
            if name not in before:
                control_plane.stop_component(name)


@pytest.fixture(scope="module")
def annotator_identity(control_plane: ControlPlane, kubectl: Kubectl) -> Path:
    return grant_annotator(control_plane, kubectl, "aibom-annotator")


@pytest.fixture
def ns(kubectl: Kubectl, namespace: str) -> str:
    kubectl("label", "namespace", namespace, f"{LABEL_KEY}={namespace}", "--overwrite")
    grant_lease(kubectl, namespace, "aibom-annotator", "aibom-test")
    return namespace


@pytest.fixture
def start(tmp_path: Path, annotator_identity: Path, ns: str) -> Iterator[StartAnnotator]:
    """Start annotators for this test's namespace; all are stopped (SIGTERM) after it."""
    started: list[Annotator] = []

    def make(
        *args: str, kubeconfig: Path | None = None, ident: str = "annotator-a", wait: bool = True
    ) -> Annotator:
        # These tests are about everything but provenance (tests/integration/
        # test_provenance.py): objects made by the admin are taken as written.
        args = ("--trust-owner-references", *args)
        a = Annotator(
            kubeconfig or annotator_identity, tmp_path, ns, identity=ident, args=args
        ).start()
        started.append(a)
        if wait:
            a.wait_ready().wait_leading()
        return a

    yield make
    for a in started:
        if a.alive():
            code = a.stop()
            assert code == 0, f"annotator {a.identity} exited {code}:\n{a.tail()}"


@pytest.fixture
def annotator(start: StartAnnotator) -> Annotator:
    return start()


@pytest.fixture(scope="module")
def start_webhook(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartWebhook]:
    """Start webhooks for this module; all are unregistered and stopped after it."""
    with contextlib.ExitStack() as running:

        def make(
            *,
            user: str,
            name: str,
            selector: dict[str, str] | None = None,
            args: tuple[str, ...] = (),
        ) -> Webhook:
            workdir = tmp_path_factory.mktemp(name)
            hook = running_webhook(
                control_plane, kubectl, workdir, user=user, name=name, selector=selector, args=args
            )
            return running.enter_context(hook)

        yield make


@pytest.fixture(scope="module")
def provenance_guard(kubectl: Kubectl) -> Iterator[None]:
    with guard_applied(kubectl):
        yield


@pytest.fixture
def spaces(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    webhook: Webhook,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Spaces]:
    request.getfixturevalue("provenance_guard")
    module = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    prefix = module.replace("_", "-")[:12].strip("-")
    with operator_namespaces(control_plane, kubectl, webhook, tmp_path, prefix=prefix) as s:
        yield s
