"""The annotator's signing key: published before use, never removed, never reused for
another key; an unreadable key file is logged once and the old key kept (docs/signing.md).

`annotator.signing.publish` runs against `RecordingApi` (ConfigMaps with
resourceVersions: a merge patch carrying a stale one is a 409, as on the API
server); the controller's order of requests is read from the same record.
tests/integration/test_signing.py rotates a key on the real API server.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from aibom_core import jsf
from aibom_core.document import DATA_KEY, DocLabels
from aibom_core.objects import Obj
from annotator.signing import Signing, load_key, publish
from annotator.writer import APPLY, MERGE, WriteError
from tests.unit.recording_api import CONFIGMAPS, Call, RecordingApi, until, write_through
from tests.unit.test_annotator_controller import Recorder, controller

NS, NAME = jsf.KEYS_NAMESPACE, jsf.KEYS_CONFIGMAP
KEYS_LIST = CONFIGMAPS.format(ns=NS)
KEYS_CM = f"{KEYS_LIST}/{NAME}"
UNREADABLE = "cannot read the signing key file"


def new_key(kid: str | None = None) -> jsf.SigningKey:
    return jsf.SigningKey.of(jsf.generate(), kid=kid)


def keys_cm(*keys: jsf.SigningKey) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": NS, "labels": dict(jsf.KEYS_CONFIGMAP_LABELS)},
        "data": {jsf.KEYS_DATA_KEY: jsf.KeySet.of([k.jwk for k in keys]).to_json()},
    }


def published(api: RecordingApi) -> dict[str, dict[str, Any]]:
    cm = api.configmap(NS, NAME)
    if cm is None:
        return {}
    keys = jsf.KeySet.parse(cm["data"][jsf.KEYS_DATA_KEY]).keys
    return {kid: dict(jwk) for kid, jwk in keys.items()}


def writes(api: RecordingApi) -> list[tuple[str, str]]:
    return [(c.method, c.path) for c in api.calls if c.method != "GET"]


# -- publish() ---------------------------------------------------------------------


async def test_publish_creates_the_keys_configmap_when_there_is_none() -> None:
    api = RecordingApi()
    k1 = new_key("k1")
    assert await publish(api, k1, NS, NAME) == "created"  # type: ignore[arg-type]
    assert published(api) == {"k1": k1.jwk}
    assert api.configmaps[NS, NAME]["metadata"]["labels"] == jsf.KEYS_CONFIGMAP_LABELS
    # Read by list (the annotator's RBAC has no `get`), then created.
    assert [(c.method, c.path) for c in api.calls] == [("GET", KEYS_LIST), ("POST", KEYS_LIST)]
    assert api.calls[0].params["fieldSelector"] == f"metadata.name={NAME}"


async def test_publish_adds_beside_the_published_keys_and_never_removes_one() -> None:
    api = RecordingApi()
    k0 = new_key("k0")
    api.put(keys_cm(k0))
    expected = {"k0": k0.jwk}
    for kid in ("k1", "k2", "k3"):
        key = new_key(kid)
        assert await publish(api, key, NS, NAME) == "added"  # type: ignore[arg-type]
        expected[kid] = key.jwk
        assert published(api) == expected  # every key published before is still there
    patches = [c for c in api.calls if c.method == "PATCH"]
    assert len(patches) == 3 and {c.path for c in patches} == {KEYS_CM}
    assert all(c.content_type == MERGE and c.body["metadata"]["resourceVersion"] for c in patches)
    # Published already: nothing is written.
    before = len(api.calls)
    assert await publish(api, key, NS, NAME) == "present"  # type: ignore[arg-type]
    assert writes(api) == [("PATCH", KEYS_CM)] * 3 and len(api.calls) == before + 1


async def test_a_kid_published_for_another_key_is_refused_naming_the_kid() -> None:
    api = RecordingApi()
    theirs = new_key("k1")
    api.put(keys_cm(theirs))
    stored = copy.deepcopy(api.configmap(NS, NAME))
    with pytest.raises(WriteError, match="key id 'k1' is already published for another key"):
        await publish(api, new_key("k1"), NS, NAME)  # type: ignore[arg-type]
    assert api.configmap(NS, NAME) == stored
    assert writes(api) == []


async def test_a_concurrent_change_is_read_again_and_both_keys_kept() -> None:
    # Another replica (or `keys jwks | kubectl replace`) publishes k9 between
    # our read and our patch: the patch carries the resourceVersion we read,
    # so it is refused (409); we read again and add ours beside k9.
    api = RecordingApi()
    k0, k9, k1 = new_key("k0"), new_key("k9"), new_key("k1")
    api.put(keys_cm(k0))

    def other_writer(call: Call) -> None:
        if call.method == "PATCH" and "k9" not in published(api):
            api.put(keys_cm(k0, k9))

    api.before = other_writer
    assert await publish(api, k1, NS, NAME) == "added"  # type: ignore[arg-type]
    assert published(api) == {"k0": k0.jwk, "k9": k9.jwk, "k1": k1.jwk}
    assert [(c.method, c.path) for c in api.calls] == [
        ("GET", KEYS_LIST),
        ("PATCH", KEYS_CM),  # 409: k9 came meanwhile
        ("GET", KEYS_LIST),
        ("PATCH", KEYS_CM),
    ]


async def test_a_configmap_created_meanwhile_is_read_again_not_overwritten() -> None:
    api = RecordingApi()
    k9, k1 = new_key("k9"), new_key("k1")

    def other_writer(call: Call) -> None:
        if call.method == "POST" and api.configmap(NS, NAME) is None:
            api.put(keys_cm(k9))

    api.before = other_writer
    assert await publish(api, k1, NS, NAME) == "added"  # type: ignore[arg-type]
    assert published(api) == {"k9": k9.jwk, "k1": k1.jwk}
    assert writes(api) == [("POST", KEYS_LIST), ("PATCH", KEYS_CM)]


# -- the controller: publish, then sign ----------------------------------------------


def verified_applies(api: RecordingApi) -> list[tuple[str, str | None]]:
    """Check each document apply, as it reaches the server, against the keys published then."""
    seen: list[tuple[str, str | None]] = []

    def check(call: Call) -> None:
        if call.method == "PATCH" and call.content_type == APPLY:
            keys = jsf.KeySet({kid: jwk for kid, jwk in published(api).items()})
            verdict = jsf.verify_bytes(call.body["data"][DATA_KEY], keys)
            seen.append((verdict.status.value, verdict.kid))

    api.before = check
    return seen


async def test_a_key_is_published_before_the_first_document_signed_with_it() -> None:
    api = RecordingApi()
    c, key = controller(Recorder())
    write_through(c, api)
    child = c.state.configmap("ns", "aibom-statefulset-l")
    assert child is not None
    api.serve(child)
    seen = verified_applies(api)
    k1, k2 = new_key("k1"), new_key("k2")
    c.signer.signing = Signing(k1, (NS, NAME))
    assert await c.documents.reconcile(key) == "written"
    # A rotated key file (annotator.signing.Signer.watch): every document is
    # signed again, by k2, which must be published first.
    c.signer.signing = Signing(k2, (NS, NAME))
    assert await c.documents.reconcile(key) == "written"
    # No document ever reached the server signed by a key not published then.
    assert seen == [("valid", "k1"), ("valid", "k2")]
    doc = CONFIGMAPS.format(ns="ns")
    assert [(call.method, call.path) for call in api.calls] == [
        ("GET", KEYS_LIST),
        ("POST", KEYS_LIST),  # k1 published...
        ("PATCH", f"{doc}/aibom-leaderworkerset-l"),  # ...then the document signed by it
        ("DELETE", f"{doc}/aibom-statefulset-l"),
        ("GET", KEYS_LIST),
        ("PATCH", KEYS_CM),  # k2 added beside k1...
        ("PATCH", f"{doc}/aibom-leaderworkerset-l"),  # ...then the document re-signed
    ]
    assert set(published(api)) == {"k1", "k2"}
    cm = api.configmap("ns", "aibom-leaderworkerset-l")
    assert cm is not None and cm["metadata"]["annotations"][DocLabels().signed_by] == "k2"


async def test_a_reused_kid_writes_no_document() -> None:
    api = RecordingApi()
    api.put(keys_cm(new_key("k1")))
    c, key = controller(Recorder())
    write_through(c, api)
    c.signer.signing = Signing(new_key("k1"), (NS, NAME))
    with pytest.raises(WriteError, match="'k1'"):
        await c.documents.reconcile(key)  # the worker logs it and retries with backoff
    assert writes(api) == []


# -- an unreadable key file --------------------------------------------------------


class BodyRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    async def apply_configmap(self, body: dict[str, Any]) -> Obj:
        self.bodies.append(copy.deepcopy(body))
        return await super().apply_configmap(body)


def replace_file(path: Path, data: bytes) -> None:
    """As the kubelet updates a mounted Secret: the new file appears whole."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


async def test_an_unreadable_key_file_is_logged_once_and_the_old_key_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("annotator.signing.KEY_RECHECK", 0.0)
    failures = [0]
    reload = Signing.reload

    def counting_reload(self: Signing) -> Signing | None:
        try:
            return reload(self)
        except ValueError:
            failures[0] += 1
            raise

    monkeypatch.setattr(Signing, "reload", counting_reload)
    caplog.set_level(logging.WARNING, logger="annotator")
    path = tmp_path / "tls.key"
    path.write_bytes(jsf.private_pem(jsf.generate()))
    signing = Signing(load_key(str(path)), None, str(path))
    rec = BodyRecorder()
    c, key = controller(rec)
    c.signer.signing = signing

    def logged() -> int:
        return sum(UNREADABLE in r.getMessage() for r in caplog.records)

    watcher = asyncio.create_task(c.signer.watch())
    try:
        replace_file(path, b"not a key\n")
        await until("five failed checks", lambda: failures[0] >= 5)
        assert logged() == 1
        assert c.signer.signing is signing  # still signing with the key it has
        assert await c.documents.reconcile(key) == "written"
        document = rec.bodies[-1]["data"][DATA_KEY]
        verdict = jsf.verify_bytes(document, jsf.KeySet.of([signing.key.jwk]))
        assert (verdict.status, verdict.kid) == (jsf.Status.VALID, signing.key.kid)
        # A readable key again is taken; a later bad file is a new episode,
        # logged again (once).
        new = jsf.private_pem(jsf.generate())
        replace_file(path, new)
        await until("the new key", lambda: c.signer.signing is not signing)
        assert c.signer.signing is not None and c.signer.signing.key.jwk == load_key(str(path)).jwk
        seen = failures[0]
        replace_file(path, b"not a key\n")
        await until("five more failed checks", lambda: failures[0] >= seen + 5)
        assert logged() == 2
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
