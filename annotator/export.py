"""Export: every new document version to an OCI registry, through a durable, bounded backlog.

The order, for one version (docs/annotator.md, "Export"):

1. **Recorded** (`Exporter.record`, awaited by the reconcile *before* it writes
   the document): the signed document bytes (gzip) and what describes them
   (root, input hash, signer, the time) go into a backlog ConfigMap in the
   annotator's namespace (`aibom-export-<hex>`, label
   `app.kubernetes.io/managed-by=aibom-rollup-export`). Versions recorded
   within a few milliseconds share one ConfigMap (group commit: one write for
   many reconciles at a cold start). Once this returns, the version survives a
   crash, a restart and a leader change.
2. **Written**: the reconcile applies the document ConfigMap as before. A
   definite refusal (4xx) withdraws the record; a lost answer does not (the
   write may have landed: the version is exported, and a second record of the
   same bytes is a no-op in the registry).
3. **Pushed** (`_worker`, off the event loop through `aibom_edge.oci`):
   first the referrers (the same document, a manifest whose `subject` is
   each image digest the document names, in that image's repository of the
   export registry, only where the registry holds the image: a subject
   descriptor needs its size and media type), then the version itself,
   tagged `sha256-<hex>` in the root's repository: the tag is written last,
   so "the tag exists" means "everything of this version is there", and a
   version whose tag exists is never pushed again (a restarted or new leader
   asks the registry first). Manifests are deterministic (the time is the
   recorded one), so even a repeated push writes the same bytes.
4. **Forgotten**: when every version of a backlog ConfigMap is in the
   registry, the ConfigMap is deleted (with its UID as a precondition).

Faults: any failure (no answer, timeout, 401/403, 429, 5xx, a full registry)
pauses every push with exponential backoff (1 s doubling to 5 min, the
registry's `Retry-After` when longer); documents in the cluster are written
regardless (the reconcile waits only for the backlog ConfigMap, never for the
registry).

The bound: `--export-backlog-bytes` (default 64 MiB of compressed documents
in ConfigMaps in etcd). Past it a version is not recorded: counted in
`aibom_annotator_export_dropped_total`, logged once per root, and its root
remembered, so that the root's *current* document is exported once the
backlog has drained below half (the versions in between are lost, and the
counter says how many). That memory does not survive a restart.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry

from aibom_core import trail
from aibom_core.document import MANAGED_BY_LABEL, DocLabels, label_value, unpack
from aibom_edge.kube import Kube, KubeError
from aibom_edge.metrics import Collectors
from aibom_edge.oci import Endpoint, OciError

if TYPE_CHECKING:
    # The ORAS SDK imports jsonschema's format checkers, which build an RFC 3987
    # grammar at import: about 1.5 s of CPU that an annotator without --export
    # never needs (BENCHMARKS.md, "make test"). Imported where a client is made.
    from aibom_edge.oci_client import Client

log = logging.getLogger("annotator")

BACKLOG_MANAGED_BY: Final = "aibom-rollup-export"
BACKLOG_SELECTOR: Final = f"{MANAGED_BY_LABEL}={BACKLOG_MANAGED_BY}"
BACKLOG_PREFIX: Final = "aibom-export-"
ENTRIES_KEY: Final = "versions.json"
# One backlog ConfigMap holds at most this much compressed document (base64 in
# binaryData adds a third; a ConfigMap holds 1 MiB).
BATCH_BYTES: Final = 600 * 1024
DEFAULT_BACKLOG_BYTES: Final = 64 << 20
MIN_BACKLOG_BYTES: Final = 1024
SUBJECTS_KEPT: Final = 10_000  # image descriptors remembered (a few MB at most)
ABSENT_RECHECK: Final = 300.0  # an image absent from the registry is asked for again after
MIN_BACKOFF: Final = 1.0
MAX_BACKOFF: Final = 300.0


class BacklogWriteError(Exception):
    """The backlog ConfigMap could not be written: the reconcile retries."""


@dataclass(frozen=True)
class ExportSettings:
    endpoint: Endpoint
    namespace: str  # where the backlog lives (the annotator's own namespace)
    cluster: str = ""  # "" -> the UID of namespace kube-system
    image_template: str = trail.DEFAULT_IMAGE_TEMPLATE
    referrers: bool = True
    backlog_bytes: int = DEFAULT_BACKLOG_BYTES
    workers: int = 4
    flush_delay: float = 0.01
    min_backoff: float = MIN_BACKOFF
    max_backoff: float = MAX_BACKOFF


@dataclass
class Pending:
    """One recorded version."""

    version: trail.Version
    packed: bytes  # gzip of the document
    batch: str = ""  # the backlog ConfigMap holding it
    withdrawn: bool = False
    done: bool = False
    durable: asyncio.Future[None] | None = field(default=None, repr=False)

    @property
    def document(self) -> bytes:
        return gzip.decompress(self.packed)


@dataclass
class _Batch:
    name: str
    uid: str
    entries: list[Pending]


class ExportMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        c = Collectors(registry)
        self.backlog_versions = c.gauge(
            "aibom_annotator_export_backlog_versions",
            "Document versions recorded and not yet in the export registry (the leader's).",
        )
        self.backlog_bytes = c.gauge(
            "aibom_annotator_export_backlog_bytes",
            "Compressed bytes of those versions, kept in backlog ConfigMaps.",
        )
        self.backlog_limit = c.gauge(
            "aibom_annotator_export_backlog_limit_bytes",
            "--export-backlog-bytes: past it, versions are not recorded (dropped).",
        )
        self.exports = c.counter(
            "aibom_annotator_exports",
            "Versions done: `pushed`, or `present` (the registry had it: not pushed again).",
            ["result"],
        )
        self.failures = c.counter(
            "aibom_annotator_export_failures",
            "Failed registry attempts, by reason: unreachable (no answer, timeout), auth "
            "(401/403), throttled (429), server (5xx), refused (another 4xx).",
            ["reason"],
        )
        self.dropped = c.counter(
            "aibom_annotator_export_dropped",
            "Versions not recorded because the backlog was full (their root's current "
            "document is exported once it drains).",
        )
        self.referrers = c.counter(
            "aibom_annotator_export_referrers",
            "Referrers of image digests: attached, present, image_absent (the export "
            "registry does not hold the image), unnamed (no repository name for it).",
            ["result"],
        )
        self.last_success = c.gauge(
            "aibom_annotator_export_last_success_timestamp_seconds",
            "When a version was last pushed or found present.",
        )
        self.push_seconds = c.histogram(
            "aibom_annotator_export_push_duration_seconds",
            "Time to push one version (referrers included), successful or not.",
            [],
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )


def now_rfc3339(clock: Callable[[], float] = time.time) -> str:
    return datetime.fromtimestamp(clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Exporter:
    def __init__(
        self,
        kube: Kube,
        settings: ExportSettings,
        metrics: ExportMetrics,
        *,
        is_leader: Callable[[], bool],
        client: Client | None = None,
        clock: Callable[[], float] = time.time,
        labels: DocLabels | None = None,
    ) -> None:
        self.kube = kube
        # The documents' label and annotation keys, under the configured prefix.
        self.labels = labels or DocLabels()
        self.settings = settings
        self.metrics = metrics
        self.is_leader = is_leader
        if client is None:
            from aibom_edge.oci_client import Client  # the ORAS SDK: see the imports

            client = Client(settings.endpoint)
        self.client = client
        self.clock = clock
        self.cluster = settings.cluster
        self.metrics.backlog_limit.set(settings.backlog_bytes)
        self._batches: dict[str, _Batch] = {}
        self._open: list[Pending] = []
        self._flush: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[Pending] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._bytes = 0
        self._failures = 0
        self._paused_until = 0.0
        self._overflowed: dict[tuple[str, str], trail.RootId] = {}
        self._reload_credentials = False
        self._logged: set[tuple[str, ...]] = set()
        self._locks_lock = threading.Lock()
        self._stripes = tuple(threading.Lock() for _ in range(64))
        self._subjects: dict[tuple[str, str], dict[str, Any]] = {}
        self._absent: dict[tuple[str, str], float] = {}
        self.idle = asyncio.Event()
        self.idle.set()
        self.resumed = asyncio.Event()  # the backlog was read (leading)

    # -- leadership ---------------------------------------------------------------------

    def start_leading(self) -> None:
        """Take over the backlog (a restart or a new leader), then push."""
        self.stop_leading()
        self._tasks = [asyncio.create_task(self._resume(), name="export-resume")]

    async def _resume(self) -> None:
        delay = self.settings.min_backoff
        while True:
            try:
                if not self.cluster:
                    self.cluster = await self._cluster_id()
                batches = await self._load()
                break
            except (KubeError, TimeoutError) as exc:
                log.warning(
                    "cannot read the export backlog; will retry",
                    extra={"error": str(exc)[:300], "retry_in_s": delay},
                )
                await asyncio.sleep(delay)
                delay = min(self.settings.max_backoff, delay * 2)
        for batch in batches:
            if batch.name in self._batches:
                continue
            self._batches[batch.name] = batch
            for entry in batch.entries:
                self._bytes += len(entry.packed)
                self._queue.put_nowait(entry)
        self._gauges()
        if batches:
            self.idle.clear()
            log.info(
                "export backlog resumed",
                extra={"versions": self._queue.qsize(), "configmaps": len(batches)},
            )
        self.resumed.set()
        self._tasks += [
            asyncio.create_task(self._worker(), name=f"export-{i}")
            for i in range(self.settings.workers)
        ]

    def stop_leading(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        self.resumed.clear()
        self._batches.clear()
        self._open.clear()
        self._queue = asyncio.Queue()
        self._bytes = 0
        self._gauges()

    async def stop(self) -> None:
        tasks = list(self._tasks)
        self.stop_leading()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- recording (the reconcile's side) -----------------------------------------------

    async def record(
        self, root: trail.RootId, *, document: bytes, input_hash: str, signed_by: str
    ) -> Pending | None:
        """Make a version durable before its document is written; None past the bound."""
        packed = gzip.compress(document, mtime=0)
        version = trail.Version(
            root=root,
            cluster=self.cluster,
            digest=trail.digest_of(document),
            size=len(document),
            input_hash=input_hash,
            created=now_rfc3339(self.clock),
            signed_by=signed_by,
        )
        if self._bytes + len(packed) > self.settings.backlog_bytes or len(packed) > BATCH_BYTES:
            self._overflow(root)
            return None
        entry = Pending(version, packed, durable=asyncio.get_running_loop().create_future())
        self._bytes += len(packed)
        self._open.append(entry)
        if sum(len(e.packed) for e in self._open) >= BATCH_BYTES:
            await self._write_open()
        elif self._flush is None or self._flush.done():
            self._flush = asyncio.create_task(self._flush_later(), name="export-flush")
        assert entry.durable is not None
        try:
            await asyncio.shield(entry.durable)
        except BacklogWriteError:
            self._bytes -= len(packed)
            raise
        return entry

    def committed(self, entry: Pending) -> None:
        """Its document was written (or may have been): push it."""
        self._queue.put_nowait(entry)
        self.idle.clear()
        self._gauges()

    def withdraw(self, entry: Pending) -> None:
        """Its document was refused: it is no version of the cluster's."""
        entry.withdrawn = True
        self._queue.put_nowait(entry)  # the worker forgets it (and its batch, if last)

    async def _flush_later(self) -> None:
        # Versions recorded while a batch is being written wait for the next one: loop
        # until none is left (record() starts a flusher only when none runs).
        while True:
            await asyncio.sleep(self.settings.flush_delay)
            await self._write_open()
            if not self._open:
                return

    async def _write_open(self) -> None:
        entries, self._open = self._open, []
        if not entries:
            return
        try:
            batch = await self._create(entries)
        except Exception as exc:  # every waiting reconcile must hear of it, whatever it is
            if not isinstance(exc, KubeError | TimeoutError | BacklogWriteError):
                log.exception("writing the export backlog crashed (a bug); will retry")
            error = exc if isinstance(exc, BacklogWriteError) else BacklogWriteError(str(exc))
            for e in entries:
                if e.durable is not None and not e.durable.done():
                    e.durable.set_exception(error)
            return
        self._batches[batch.name] = batch
        for e in entries:
            e.batch = batch.name
            if e.durable is not None and not e.durable.done():
                e.durable.set_result(None)

    async def _create(self, entries: list[Pending]) -> _Batch:
        if not self.is_leader():
            raise BacklogWriteError("not the leader: the backlog is the leader's")
        seed = "\n".join(
            f"{e.version.digest} {e.version.root.uid} {e.version.created}" for e in entries
        )
        name = BACKLOG_PREFIX + hashlib.sha256(seed.encode()).hexdigest()[:20]
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.settings.namespace,
                "labels": {
                    MANAGED_BY_LABEL: BACKLOG_MANAGED_BY,
                    "app.kubernetes.io/name": "aibom-rollup",
                },
            },
            "data": {ENTRIES_KEY: json.dumps([_entry_json(e) for e in entries], sort_keys=True)},
            "binaryData": {
                _blob_key(e.version.digest): base64.b64encode(e.packed).decode() for e in entries
            },
        }
        resp = await self.kube.request(
            "POST",
            f"/api/v1/namespaces/{self.settings.namespace}/configmaps",
            json=body,
            timeout=30,
        )
        if resp.status == 409:  # the same batch, created by a request whose answer was lost
            return _Batch(name, "", entries)
        if not resp.ok or not isinstance(resp.body, dict):
            raise BacklogWriteError(
                f"create backlog ConfigMap {self.settings.namespace}/{name}: HTTP {resp.status}:"
                f" {_message(resp.body)}"
            )
        return _Batch(name, str(resp.body["metadata"].get("uid", "")), entries)

    async def _load(self) -> list[_Batch]:
        resp = await self.kube.request(
            "GET",
            f"/api/v1/namespaces/{self.settings.namespace}/configmaps",
            params={"labelSelector": BACKLOG_SELECTOR},
            timeout=30,
        )
        if not resp.ok or not isinstance(resp.body, dict):
            raise KubeError(f"list the export backlog: HTTP {resp.status}: {_message(resp.body)}")
        out = []
        for cm in resp.body.get("items") or []:
            meta = cm.get("metadata") or {}
            name = str(meta.get("name", ""))
            try:
                entries = _entries_of(cm, name)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning(
                    "export backlog ConfigMap unreadable; left as it is",
                    extra={"configmap": name, "error": str(exc)[:300]},
                )
                continue
            out.append(_Batch(name, str(meta.get("uid", "")), entries))
        return sorted(out, key=lambda b: min((e.version.created for e in b.entries), default=""))

    # -- pushing (workers) --------------------------------------------------------------

    async def _worker(self) -> None:
        while True:
            entry = await self._queue.get()
            if entry.done:
                continue
            if entry.withdrawn:
                await self._finish(entry)
                continue
            wait = self._paused_until - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            began = time.perf_counter()
            try:
                result = await asyncio.to_thread(self._push, entry)
            except OciError as exc:
                self._failed(entry, exc)
                self._queue.put_nowait(entry)
                continue
            except Exception as exc:  # a bug, or the library's: logged, retried, never lost
                log.exception(
                    "export crashed (a bug); will retry", extra={"digest": entry.version.digest}
                )
                self._failed(entry, OciError(f"{type(exc).__name__}: {exc}"))
                self._queue.put_nowait(entry)
                continue
            finally:
                self.metrics.push_seconds.observe(time.perf_counter() - began)
            self._failures = 0
            self.metrics.exports.labels(result).inc()
            self.metrics.last_success.set(self.clock())
            log.info(
                "version exported" if result == "pushed" else "version already in the registry",
                extra={
                    "root": f"{entry.version.root.namespace}/{entry.version.root.ref}",
                    "digest": entry.version.digest,
                    "input_hash": entry.version.input_hash,
                },
            )
            await self._finish(entry)
            if self._overflowed and self._bytes < self.settings.backlog_bytes // 2:
                await self._catch_up()

    def _failed(self, entry: Pending, exc: OciError) -> None:
        self._failures += 1
        delay = min(
            self.settings.max_backoff, self.settings.min_backoff * 2 ** (self._failures - 1)
        )
        if exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, self.settings.max_backoff))
        self._paused_until = max(self._paused_until, time.monotonic() + delay)
        self.metrics.failures.labels(exc.reason).inc()
        self._reload_credentials = exc.reason == "auth"
        log.warning(
            "export failed; will retry",
            extra={
                "root": f"{entry.version.root.namespace}/{entry.version.root.ref}",
                "digest": entry.version.digest,
                "reason": exc.reason,
                "error": str(exc)[:500],
                "retry_in_s": round(delay, 3),
            },
        )

    def _push(self, entry: Pending) -> str:
        """One version, referrers first, the tag last (blocking: runs in a thread)."""
        c, s, v = self.client, self.settings, entry.version
        if self._reload_credentials:
            self._reload_credentials = False
            c.reload()  # a 401/403 may be a rotated Secret: read it again
        repo = trail.check_repository(trail.root_repository(s.endpoint.prefix, v.cluster, v.root))
        if c.head_manifest(repo, v.tag) is not None:
            return "present"
        document = entry.document
        if s.referrers:
            self._push_referrers(v, document)
        c.push_empty_config(repo)
        c.push_blob(repo, document, v.digest)
        c.push_manifest(repo, v.tag, trail.manifest(v))
        return "pushed"

    def _push_referrers(self, version: trail.Version, document: bytes) -> None:
        from aibom_edge.oci_client import manifest_digest  # loaded with the client

        c = self.client
        for image, digest in trail.image_digests(json.loads(document)):
            repo = trail.image_repository(self.settings.image_template, image)
            if repo is None:
                self.metrics.referrers.labels("unnamed").inc()
                continue
            subject = self._subject(repo, digest)
            if subject is None:
                self.metrics.referrers.labels("image_absent").inc()
                self._once(
                    ("image-absent", repo),
                    "image not in the export registry: its referrer is not attached",
                    repository=repo,
                    digest=digest,
                )
                continue
            body = trail.manifest(version, subject=subject)
            ref = manifest_digest(body)
            with self._subject_lock(repo, digest):
                if any(
                    r.get("digest") == ref for r in c.referrers(repo, digest, trail.ARTIFACT_TYPE)
                ):
                    self.metrics.referrers.labels("present").inc()
                    continue
                c.push_empty_config(repo)
                c.push_blob(repo, document, version.digest)
                c.attach(repo, body)
            self.metrics.referrers.labels("attached").inc()

    def _subject(self, repository: str, digest: str) -> dict[str, Any] | None:
        """The image manifest's descriptor, or None when the registry does not hold it.
        Remembered: a digest names one manifest forever (bounded), and an absent image is
        asked for again only after ABSENT_RECHECK seconds (roots share images: at a cold
        start of 1,000 roots, one HEAD per image, not one per root)."""
        key = (repository, digest)
        with self._locks_lock:
            known = self._subjects.get(key)
            absent_until = self._absent.get(key, 0.0)
        if known is not None:
            return known
        if absent_until > time.monotonic():
            return None
        found = self.client.head_manifest(repository, digest)
        with self._locks_lock:
            if found is not None:
                if len(self._subjects) >= SUBJECTS_KEPT:
                    self._subjects.pop(next(iter(self._subjects)))
                self._subjects[key] = found
            else:
                if len(self._absent) >= SUBJECTS_KEPT:
                    self._absent.pop(next(iter(self._absent)))
                self._absent[key] = time.monotonic() + ABSENT_RECHECK
        return found

    def _subject_lock(self, repository: str, digest: str) -> threading.Lock:
        """The lock of an image digest (striped: a fixed set): the referrers tag schema's
        index is read and written back, so two workers attaching to one image take turns."""
        return self._stripes[hash((repository, digest)) % len(self._stripes)]

    async def _finish(self, entry: Pending) -> None:
        entry.done = True
        self._bytes = max(0, self._bytes - len(entry.packed))
        batch = self._batches.get(entry.batch)
        if batch is not None and all(e.done for e in batch.entries):
            await self._forget(batch)
        self._gauges()
        if self._queue.empty() and not any(
            not e.done for b in self._batches.values() for e in b.entries
        ):
            self.idle.set()

    async def _forget(self, batch: _Batch) -> None:
        if not self.is_leader():
            return
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if batch.uid:
            options["preconditions"] = {"uid": batch.uid}
        try:
            resp = await self.kube.request(
                "DELETE",
                f"/api/v1/namespaces/{self.settings.namespace}/configmaps/{batch.name}",
                json=options,
                timeout=30,
            )
        except (KubeError, TimeoutError) as exc:
            log.warning("could not delete an exported backlog ConfigMap", extra={"error": str(exc)})
            return
        if resp.ok or resp.status == 404:
            self._batches.pop(batch.name, None)
        else:
            # Left for the next leader: it finds every version present and deletes it then.
            log.warning(
                "could not delete an exported backlog ConfigMap",
                extra={"configmap": batch.name, "status": resp.status},
            )

    # -- past the bound -----------------------------------------------------------------

    def _overflow(self, root: trail.RootId) -> None:
        self.metrics.dropped.inc()
        self._overflowed[(root.namespace, root.uid)] = root
        self._once(
            ("dropped", root.namespace, root.uid),
            "export backlog full: this version is not recorded; the root's current document "
            "is exported once the backlog drains",
            root=f"{root.namespace}/{root.ref}",
            backlog_bytes=self._bytes,
            limit=self.settings.backlog_bytes,
        )

    async def _catch_up(self) -> None:
        """Record the current document of every root whose versions were dropped."""
        roots, self._overflowed = list(self._overflowed.values()), {}
        for root in roots:
            self._logged.discard(("dropped", root.namespace, root.uid))
            try:
                found = await self._current(root)
            except (KubeError, TimeoutError) as exc:
                log.warning("export catch-up: cannot read a document", extra={"error": str(exc)})
                self._overflowed[(root.namespace, root.uid)] = root
                continue
            if found is None:
                continue
            document, input_hash, signed_by = found
            try:
                entry = await self.record(
                    root, document=document, input_hash=input_hash, signed_by=signed_by
                )
            except BacklogWriteError:
                self._overflowed[(root.namespace, root.uid)] = root
                continue
            if entry is not None:
                self.committed(entry)

    async def _current(self, root: trail.RootId) -> tuple[bytes, str, str] | None:
        resp = await self.kube.request(
            "GET",
            f"/api/v1/namespaces/{root.namespace}/configmaps",
            params={"labelSelector": f"{self.labels.root_uid}={label_value(root.uid)}"},
            timeout=30,
        )
        if not resp.ok or not isinstance(resp.body, dict):
            raise KubeError(f"list the document of {root.ref}: HTTP {resp.status}")
        for cm in resp.body.get("items") or []:
            document = unpack(cm)
            if document is None:
                continue
            ann = (cm.get("metadata") or {}).get("annotations") or {}
            return (
                document,
                str(ann.get(self.labels.input_hash, "")),
                str(ann.get(self.labels.signed_by, "")),
            )
        return None

    # -- helpers ------------------------------------------------------------------------

    async def _cluster_id(self) -> str:
        resp = await self.kube.request(
            "GET", "/api/v1/namespaces", params={"fieldSelector": "metadata.name=kube-system"}
        )
        items = resp.body.get("items") if resp.ok and isinstance(resp.body, dict) else None
        if items:
            return str(items[0]["metadata"]["uid"])
        log.warning(
            "cannot read namespace kube-system's UID; "
            "cluster id 'default' (set --export-cluster-id)"
        )
        return "default"

    def _gauges(self) -> None:
        pending = sum(1 for b in self._batches.values() for e in b.entries if not e.done)
        self.metrics.backlog_versions.set(pending)
        self.metrics.backlog_bytes.set(self._bytes)

    def _once(self, marker: tuple[str, ...], msg: str, **fields: Any) -> None:
        if marker in self._logged:
            return
        self._logged.add(marker)
        log.warning(msg, extra=fields)


def _entry_json(e: Pending) -> dict[str, Any]:
    v = e.version
    return {
        "root": {
            "group": v.root.group,
            "kind": v.root.kind,
            "name": v.root.name,
            "namespace": v.root.namespace,
            "uid": v.root.uid,
        },
        "cluster": v.cluster,
        "digest": v.digest,
        "size": v.size,
        "inputHash": v.input_hash,
        "created": v.created,
        "signedBy": v.signed_by,
    }


def _entries_of(cm: dict[str, Any], name: str) -> list[Pending]:
    raw = json.loads((cm.get("data") or {})[ENTRIES_KEY])
    blobs = cm.get("binaryData") or {}
    out = []
    for item in raw:
        r = item["root"]
        version = trail.Version(
            root=trail.RootId(
                namespace=str(r["namespace"]),
                kind=str(r["kind"]),
                name=str(r["name"]),
                group=str(r.get("group", "")),
                uid=str(r.get("uid", "")),
            ),
            cluster=str(item["cluster"]),
            digest=str(item["digest"]),
            size=int(item["size"]),
            input_hash=str(item.get("inputHash", "")),
            created=str(item["created"]),
            signed_by=str(item.get("signedBy", "")),
        )
        packed = base64.b64decode(blobs[_blob_key(version.digest)])
        if trail.digest_of(gzip.decompress(packed)) != version.digest:
            raise ValueError(f"the document of {version.digest} does not match its digest")
        out.append(Pending(version, packed, batch=name))
    return out


def _blob_key(digest: str) -> str:
    return digest.replace(":", "-") + ".json.gz"


def _message(body: Any) -> str:
    return str(body.get("message", ""))[:300] if isinstance(body, dict) else str(body)[:300]


# -- flags ------------------------------------------------------------------------------


def configure_parser(p: Any) -> None:
    """The annotator's export flags, in their own group."""
    g = p.add_argument_group(
        "export (every document version to an OCI registry; docs/annotator.md, Export)",
        "With --export-registry, each new document version is recorded in a backlog\n"
        "ConfigMap before it is written, then pushed as an OCI artifact\n"
        f"(artifactType {trail.ARTIFACT_TYPE}) tagged sha256-<hex> in\n"
        "<prefix>/<cluster>/<namespace>/<kind>.<group>/<name>, and attached as a referrer\n"
        "to each image digest it names. Never overwritten or deleted; a version the\n"
        "registry has is not pushed again.",
    )
    g.add_argument(
        "--export-registry",
        metavar="HOST[:PORT][/PREFIX]",
        help="the registry (TLS, verified) and repository prefix; default: no export",
    )
    g.add_argument(
        "--export-registry-credentials",
        metavar="FILE",
        help="a docker config JSON (the .dockerconfigjson key of a kubernetes.io/dockerconfigjson "
        "Secret, mounted); default: anonymous",
    )
    g.add_argument(
        "--export-ca-file",
        metavar="FILE",
        help="PEM CA bundle the registry's certificate must chain to (default: the system roots)",
    )
    g.add_argument(
        "--export-cluster-id",
        metavar="ID",
        default="",
        help="this cluster's name in the registry (default: the UID of namespace kube-system)",
    )
    g.add_argument(
        "--export-image-path",
        metavar="TEMPLATE",
        default=trail.DEFAULT_IMAGE_TEMPLATE,
        help="the repository, in the export registry, of an image the documents name: where "
        "its AIBOMs are attached as referrers; {host} and {repository} of the image "
        "(default: %(default)s, the path a mirror keeps; e.g. 'mirror/{repository}')",
    )
    g.add_argument(
        "--export-no-referrers",
        action="store_true",
        help="do not attach versions to the image digests they name",
    )
    g.add_argument(
        "--export-backlog-bytes",
        metavar="BYTES",
        type=int,
        default=DEFAULT_BACKLOG_BYTES,
        help="bound of the backlog (compressed documents waiting for the registry, kept in "
        "ConfigMaps); past it versions are dropped and counted, and each root's current "
        "document is exported once it drains (default: %(default)s)",
    )
    g.add_argument(
        "--export-backlog-namespace",
        metavar="NAMESPACE",
        default=None,
        help="where the backlog ConfigMaps live (default: $POD_NAMESPACE, else --lease-namespace)",
    )
    g.add_argument(
        "--export-timeout",
        metavar="SECONDS",
        type=float,
        default=30.0,
        help="one registry request's time limit (default: %(default)s)",
    )
    g.add_argument(
        "--export-workers",
        metavar="N",
        type=int,
        default=4,
        help="versions pushed at once (default: %(default)s)",
    )


def export_of(args: Any) -> ExportSettings | None:
    """Export settings from the flags (None without --export-registry); ValueError with
    a one-line reason."""
    import os

    where = getattr(args, "export_registry", None)
    if not where:
        for flag in ("export_registry_credentials", "export_ca_file", "export_cluster_id"):
            if getattr(args, flag, None):
                raise ValueError(f"--{flag.replace('_', '-')} needs --export-registry")
        return None
    for flag in ("export_registry_credentials", "export_ca_file"):
        path = getattr(args, flag, None)
        if path and not os.path.isfile(path):
            raise ValueError(f"--{flag.replace('_', '-')} {path}: no such file")
    if args.export_backlog_bytes < MIN_BACKLOG_BYTES:
        raise ValueError(f"--export-backlog-bytes must be at least {MIN_BACKLOG_BYTES}")
    if args.export_timeout <= 0 or args.export_workers < 1:
        raise ValueError("--export-timeout must be > 0 and --export-workers >= 1")
    try:
        trail.image_repository(args.export_image_path, "example.com/probe:1")
    except trail.TrailError as exc:
        raise ValueError(f"--export-image-path: {exc}") from None
    endpoint = Endpoint.parse(
        where,
        ca_file=args.export_ca_file,
        auth_file=args.export_registry_credentials,
        timeout=args.export_timeout,
    )
    namespace = (
        args.export_backlog_namespace
        or os.environ.get("POD_NAMESPACE")
        or getattr(args, "lease_namespace", None)
        or "aibom-system"
    )
    return ExportSettings(
        endpoint=endpoint,
        namespace=namespace,
        cluster=args.export_cluster_id,
        image_template=args.export_image_path,
        referrers=not args.export_no_referrers,
        backlog_bytes=args.export_backlog_bytes,
        workers=args.export_workers,
    )
