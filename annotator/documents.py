"""The document reconciler: one root's document judged, rendered, signed, fitted,
exported and written; a namespace's stale documents swept.

It executes the plans of `annotator.plan` (pure: what the cache says the
document must be) with `annotator.writer` (the only writes), in `workers`
tasks that take keys from the documents queue. With export on, each version
is recorded in the export backlog before it is applied (`annotator.export`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aibom_core.bom import render
from aibom_core.kinds import GroupKind
from aibom_core.objects import Obj, metadata
from aibom_core.trail import RootId
from aibom_edge.kube import KubeError
from annotator.cache import ClusterState
from annotator.configmap import FOREIGN_DATA, Payload, configmap_body, fit
from annotator.export import BacklogWriteError, Exporter
from annotator.keys import DocKey, RootKey, SweepKey
from annotator.metrics import Metrics
from annotator.notices import Notices
from annotator.plan import DocRef, Outcome, RootPlan, plan_root, plan_sweep
from annotator.settings import Settings
from annotator.signing import Signer
from annotator.workqueue import Queues, QueueShutDown
from annotator.writer import NotLeader, WriteError, Writer

log = logging.getLogger("annotator")

# The last verdict on a root: its outcome, why it is unresolved, the kinds rolled up into it.
Verdict = tuple[Outcome, str, tuple[str, ...]]


class DocumentReconciler:
    def __init__(
        self,
        *,
        settings: Settings,
        state: ClusterState,
        queues: Queues,
        writer: Writer,
        metrics: Metrics,
        signer: Signer,
        exporter: Exporter | None,
        notices: Notices,
        slim: Callable[[Obj], Obj],
        verdicts: dict[RootKey, Verdict],
    ) -> None:
        self.settings = settings
        self.state = state
        self.queues = queues
        self.writer = writer
        self.metrics = metrics
        self.signer = signer
        self.exporter = exporter
        self.notices = notices
        self.slim = slim
        # The last verdict on each root (current-state gauges; the leader's view).
        self.verdicts = verdicts
        self._events_sent: set[tuple[str, str]] = set()

    async def run(self) -> None:
        """One worker: take a key, reconcile it, retry it with backoff if that failed."""
        while True:
            try:
                key = await self.queues.docs.get()
            except QueueShutDown:
                return
            started = time.perf_counter()
            result = "error"
            try:
                if isinstance(key, SweepKey):
                    result = await self.sweep(key)
                else:
                    result = await self.reconcile(key)
                self.queues.docs.forget(key)
            except NotLeader:
                result = "not_leader"
            except asyncio.CancelledError:
                raise
            except (WriteError, KubeError, TimeoutError) as exc:
                delay = self.queues.docs.add_rate_limited(key)
                self.metrics.errors.labels("reconcile").inc()
                log.warning(
                    "reconcile failed; will retry",
                    extra={"key": str(key), "error": str(exc)[:500], "retry_in_s": round(delay, 3)},
                )
            except Exception:
                delay = self.queues.docs.add_rate_limited(key)
                self.metrics.errors.labels("reconcile").inc()
                log.exception("reconcile crashed (a bug); will retry", extra={"key": str(key)})
            finally:
                self.queues.docs.done(key)
                self.metrics.reconcile_duration.labels("documents", result).observe(
                    time.perf_counter() - started
                )
            await asyncio.sleep(0)

    async def reconcile(self, key: RootKey) -> str:
        plan = plan_root(
            self.state,
            key,
            generator=self.settings.generator,
            tool_version=self.settings.tool_version,
            signed_by=self.signer.signed_by(),
            salt=self.settings.sources_salt,
        )
        self._count(plan)
        if plan.requeue is not None:
            self.queues.docs.add(plan.requeue)
        result = "unchanged"
        for doc in plan.delete_now:
            await self._delete(doc, reason="not_opted_in", requeue=key)
            result = "deleted"
        if plan.ref is None or not plan.cm_name:
            return result if plan.delete_now else plan.outcome.value
        if plan.write:
            await self._write(plan)
            result = "written"
            if plan.outcome is Outcome.ROLLUP_UNRESOLVED and plan.failure is not None:
                # One count per document version that records the root unresolved
                # (the webhook: one per admission it stamps unresolved).
                self.metrics.unresolved.labels(plan.key.kind, plan.failure.reason.value).inc()
        else:
            self.metrics.documents_unchanged.inc()
            if plan.facts is None:  # current by its sources hash (annotator.plan)
                self.metrics.documents_current_by_sources.inc()
            # Judged current: a later write by anyone is a change we will look at.
            self.state.vouch(plan.ref.namespace, plan.cm_name)
        # Only now, with the document that lists them written (or already
        # current), may the documents it supersedes go.
        for doc in plan.supersedes:
            await self._delete(doc, reason="rolled_up", requeue=key)
        return result

    def _count(self, plan: RootPlan) -> None:
        kind = plan.key.kind
        self.metrics.outcomes.labels(kind, plan.outcome.value).inc()
        for owned in plan.owned:
            self.metrics.outcomes.labels(owned.kind, Outcome.ROLLED_UP.value).inc()
        if plan.outcome in (Outcome.MATCHED, Outcome.ROLLUP_UNRESOLVED) and plan.cm_name:
            reason = plan.failure.reason.value if plan.failure is not None else ""
            self.verdicts[plan.key] = (plan.outcome, reason, tuple(o.kind for o in plan.owned))
        else:
            self.verdicts.pop(plan.key, None)
        if plan.outcome is Outcome.ROLLUP_UNRESOLVED and plan.failure is not None:
            failure = plan.failure
            self.notices.once(
                ("unresolved", failure.group, failure.kind, failure.reason.value),
                "owner walk failed; the workload is reported as its own root",
                kind=str(GroupKind(failure.group, failure.kind)),
                reason=failure.reason.value,
                example=str(plan.key),
            )

    async def _write(self, plan: RootPlan) -> None:
        assert plan.ref is not None
        document = render(
            plan.facts, tool_version=self.settings.tool_version, digest=plan.input_hash or None
        )
        signing = self.signer.signing
        seal = None
        if signing is not None:
            await self.signer.publish_key(signing)
            document = signing.seal(document)
            seal = signing.seal
        limit = self.settings.size_limit
        if len(document) > limit:
            payload = await asyncio.to_thread(fit, document, limit=limit, seal=seal)
        else:
            payload = fit(document, limit=limit, seal=seal)
        body = configmap_body(
            plan.ref,
            api_version=plan.api_version,
            name=plan.cm_name,
            payload=payload,
            input_hash=plan.input_hash,
            generator=self.settings.generator,
            labels=self.settings.labels,
            signed_by=signing.key.kid if signing is not None else "",
            sources_hash=plan.sources_hash,
        )
        cached = self.state.configmap(plan.ref.namespace, plan.cm_name)
        stored = await self._apply_and_export(plan, body, document)
        if (
            cached is not None
            and cached.get(FOREIGN_DATA)
            and metadata(stored).get("resourceVersion") != metadata(cached).get("resourceVersion")
        ):
            # Someone else wrote the document (managedFields said so, or it changed
            # since the version we knew), and this apply changed it back: the server
            # found its content not ours (an apply of the same content writes nothing).
            self.metrics.documents_repaired.labels("edited").inc()
            log.warning(
                "document edited by another writer; restored",
                extra={"root": str(plan.key), "configmap": f"{plan.ref.namespace}/{plan.cm_name}"},
            )
        self.state.note_configmap(self.slim(stored))
        self.metrics.documents_written.labels(payload.encoding).inc()
        log.info(
            "document written",
            extra={
                "root": str(plan.key),
                "configmap": plan.cm_name,
                "encoding": payload.encoding,
                "bytes": payload.size,
                "owned": len(plan.owned),
                "pods": plan.pods,
                "input_hash": plan.input_hash,
            },
        )
        if payload.encoding != "json":
            await self._report_size(plan, payload)

    async def _apply_and_export(self, plan: RootPlan, body: dict[str, Any], document: bytes) -> Any:
        """Apply the document; with export on, record the version first (annotator.export)."""
        if self.exporter is None:
            return await self.writer.apply_configmap(body)
        assert plan.ref is not None
        ref = plan.ref
        root = RootId(ref.namespace, ref.kind, ref.name, group=ref.group, uid=ref.uid)
        try:
            entry = await self.exporter.record(
                root,
                document=document,
                input_hash=plan.input_hash,
                signed_by=self.signer.signed_by(),
            )
        except BacklogWriteError as exc:
            raise WriteError("record the version in the export backlog", 0, str(exc)) from None
        try:
            stored = await self.writer.apply_configmap(body)
        except BaseException as exc:
            refused = isinstance(exc, NotLeader) or (
                isinstance(exc, WriteError) and 400 <= exc.status < 500
            )
            if entry is not None and refused:
                self.exporter.withdraw(entry)  # never a version of the cluster's
            elif entry is not None:
                self.exporter.committed(entry)  # it may have landed
            raise
        if entry is not None:
            self.exporter.committed(entry)
        return stored

    async def _report_size(self, plan: RootPlan, payload: Payload) -> None:
        assert plan.ref is not None
        original, size = payload.original_size, payload.size
        cut_c, cut_o = payload.omitted_components, payload.omitted_owned
        if payload.encoding == "gzip":
            log.info(
                "document compressed to fit a ConfigMap",
                extra={"root": str(plan.key), "bytes": original, "gzip_bytes": size},
            )
            return
        log.warning(
            "document truncated to fit a ConfigMap",
            extra={
                "root": str(plan.key),
                "bytes": original,
                "omitted_components": cut_c,
                "omitted_owned": cut_o,
            },
        )
        marker = (plan.ref.uid, plan.input_hash)
        if marker in self._events_sent:
            return
        note = (
            f"The AIBOM of {plan.ref.kind}/{plan.ref.name} is {original} bytes and does not fit "
            f"ConfigMap {plan.cm_name} even gzip-compressed; it was truncated "
            f"({cut_c} components and {cut_o} owned entries left out; see the "
            f"aibom.truncated properties)."
        )
        try:
            await self.writer.event(
                plan.ref,
                api_version=plan.api_version,
                reason="AIBOMTruncated",
                note=note,
                action="WriteAIBOM",
            )
            self._events_sent.add(marker)
        except (WriteError, KubeError, TimeoutError) as exc:
            log.warning("could not record the truncation Event", extra={"error": str(exc)})

    async def _delete(self, doc: DocRef, *, reason: str, requeue: DocKey) -> None:
        if await self.writer.delete_configmap(doc):
            self.state.forget_configmap(doc.namespace, doc.name)
            self.metrics.documents_deleted.labels(reason).inc()
            log.info("document deleted", extra={"configmap": str(doc), "why": reason})
        else:
            # It changed since we looked: judge again from the fresh cache.
            self.queues.docs.add_rate_limited(requeue)

    async def sweep(self, key: SweepKey) -> str:
        plan = plan_sweep(self.state, key)
        opted = self.state.opted_in(key.namespace)
        for doc in plan.deletes:
            await self._delete(doc, reason="stale" if opted else "not_opted_in", requeue=key)
        for root in plan.requeue:
            self.queues.docs.add(root)
        return "deleted" if plan.deletes else "unchanged"
