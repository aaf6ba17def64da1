"""The controller: informers -> cache -> work queues -> reconcilers -> writer.

It builds the parts, wires them to one another and runs leadership and the
workers; each part is a module named for its job (as client-go's
controllers are):

- `annotator.informers`: the supervisor that rediscovers the API and runs
  one informer per kind it wants;
- `annotator.intake`: the informers' sink: events into the cache
  (`ClusterState`), dirty keys into the queues; standbys keep the same warm
  cache and queue nothing, the leader does one full resync when it starts
  leading (`annotator.resync` reports when that converged);
- `annotator.documents` (`workers` tasks) and `annotator.stamps` (one):
  the reconcilers, executing the plans of `annotator.plan` through `Writer`;
- `annotator.signing.Signer`: the key documents are signed with, and its
  rotation; `annotator.guardwatch`: whether the provenance guard is ours;
- `annotator.probes.Readiness` and `annotator.gauges`: what is reported.

CPU-heavy work (the walk, the hash, rendering) is pure and short per key;
only a document too big for a ConfigMap is compressed off the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from typing import Any

from aibom_edge.kube import Kube
from annotator.cache import ClusterState
from annotator.documents import DocumentReconciler, Verdict
from annotator.export import Exporter, ExportMetrics
from annotator.gauges import Gauges
from annotator.guardwatch import GuardWatch
from annotator.informers import InformerSupervisor
from annotator.intake import Intake
from annotator.keys import DocKey, RootKey
from annotator.leader import LeaderElector
from annotator.lease import ElectionConfig
from annotator.metrics import Metrics
from annotator.notices import Notices
from annotator.probes import Readiness
from annotator.resync import ResyncTracker
from annotator.settings import Settings, wanted_kinds
from annotator.signing import Signer
from annotator.slim import slimmer
from annotator.stamps import StampReconciler
from annotator.workqueue import Queues, TokenBucket, WorkQueue
from annotator.writer import Writer

log = logging.getLogger("annotator")


class Controller:
    def __init__(
        self,
        kube: Kube,
        settings: Settings,
        *,
        election: ElectionConfig | None,
        metrics: Metrics | None = None,
    ) -> None:
        self._kube = kube
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.metrics.watch_requests(lambda: dict(kube.requests))
        self.metrics.watch_client(
            lambda: dict(getattr(kube, "throttled", {})),
            lambda: int(getattr(kube, "token_refreshes", 0)),
            lambda: int(getattr(kube, "token_refresh_failures", 0)),
        )
        self.state = ClusterState(
            settings.registry,
            max_depth=settings.max_depth,
            opt_in_label=settings.namespace_label,
            labels=settings.labels,
            provenance_key=settings.provenance_key,
            keys=settings.keys,
            trust_all=settings.trust_owner_references,
        )
        self.slim = slimmer(settings.registry, stamp_prefix=settings.keys.prefix)
        self.queues = Queues()
        self._workers: list[asyncio.Task[None]] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self.synced = asyncio.Event()
        self.notices = Notices()
        self.identity = election.identity if election else "annotator"
        self.elector = (
            LeaderElector(kube, election, on_change=self._leadership) if election else None
        )
        self._writer = Writer(
            kube,
            is_leader=self.is_leader,
            bucket=TokenBucket(settings.write_qps, settings.write_burst),
            stamp_bucket=TokenBucket(settings.stamp_qps, settings.stamp_burst),
            identity=self.identity,
            lease_left=self.elector.remaining if self.elector is not None else None,
        )
        self._leading = election is None
        # The last verdict on each root (the document reconciler's; the gauges read it).
        self.verdicts: dict[RootKey, Verdict] = {}
        self.resync = ResyncTracker(
            queues=self.queues,
            metrics=self.metrics,
            is_leader=self.is_leader,
            verdicts=self.verdicts,
        )
        self.intake = Intake(
            settings=settings,
            state=self.state,
            queues=self.queues,
            metrics=self.metrics,
            notices=self.notices,
            synced=self.synced.is_set,
            leading=self._is_leading,
            check_synced=self._check_synced,
            resync=self.resync,
        )
        self.signer = Signer(
            kube,
            settings.signing,
            is_leader=self.is_leader,
            notices=self.notices,
            on_rotated=self.intake.full_resync,
        )
        exporter = (
            Exporter(
                kube,
                settings.export,
                ExportMetrics(self.metrics.registry),
                is_leader=self.is_leader,
                labels=settings.labels,
            )
            if settings.export is not None
            else None
        )
        self.exporter = exporter
        self.documents = DocumentReconciler(
            settings=settings,
            state=self.state,
            queues=self.queues,
            writer=self.writer,
            metrics=self.metrics,
            signer=self.signer,
            exporter=exporter,
            notices=self.notices,
            slim=self.slim,
            verdicts=self.verdicts,
        )
        self.gauges = Gauges(
            metrics=self.metrics,
            settings=settings,
            state=self.state,
            queues=self.queues,
            verdicts=self.verdicts,
            wanted=wanted_kinds(settings.registry),
        )
        self.guard = GuardWatch(
            kube,
            settings=settings,
            state=self.state,
            metrics=self.metrics,
            notices=self.notices,
            gauges=self.gauges,
            dirty=self.intake.dirty,
        )
        self.supervisor = InformerSupervisor(
            kube,
            settings=settings,
            state=self.state,
            sink=self.intake,
            slim=self.slim,
            guard=self.guard,
            notices=self.notices,
            dirty=self.intake.dirty,
            check_synced=self._check_synced,
        )
        self.readiness = Readiness(
            kinds_synced=self.supervisor.synced,
            waiting=self.supervisor.waiting,
            state=self.state,
            metrics=self.metrics,
            synced=self.synced,
            leading=self._is_leading,
            on_synced=self.intake.full_resync,
        )
        self.stamp_repair = StampReconciler(
            kube,
            settings=settings,
            state=self.state,
            queues=self.queues,
            writer=self.writer,
            metrics=self.metrics,
            notices=self.notices,
            watched=self.supervisor.watched,
        )

    @property
    def kube(self) -> Kube:
        return self._kube

    @kube.setter
    def kube(self, kube: Kube) -> None:
        """One API client for every part: replacing it replaces it everywhere."""
        self._kube = kube
        self.signer.kube = self.stamp_repair.kube = kube
        self.guard.kube = self.supervisor.kube = kube

    @property
    def writer(self) -> Writer:
        return self._writer

    @writer.setter
    def writer(self, writer: Writer) -> None:
        """One writer for every part: replacing it replaces it everywhere."""
        self._writer = self.documents.writer = self.stamp_repair.writer = writer

    @property
    def docs(self) -> WorkQueue[DocKey]:
        return self.queues.docs

    @property
    def stamps(self) -> WorkQueue[str]:
        return self.queues.stamps

    # -- leadership -------------------------------------------------------------

    def is_leader(self) -> bool:
        # Fenced: the elector's answer is read now, against its renew
        # deadline, not the last value it told us (annotator.leader).
        return self._leading and (self.elector is None or self.elector.is_leader)

    def _is_leading(self) -> bool:
        return self._leading

    def _leadership(self, leading: bool) -> None:
        self._leading = leading
        self.metrics.leader.set(1 if leading else 0)
        if self.exporter is not None:
            if leading:
                self.exporter.start_leading()
            else:
                self.exporter.stop_leading()
        if leading:
            self._start_workers()
            if self.synced.is_set():
                self.intake.full_resync()
        else:
            self._stop_workers()
            self.verdicts.clear()

    def _start_workers(self) -> None:
        if self._workers:
            return
        self.queues.renew()
        for i in range(self.settings.workers):
            self._workers.append(asyncio.create_task(self.documents.run(), name=f"doc-worker-{i}"))
        if self.settings.stamp_mode != "off":
            self._workers.append(asyncio.create_task(self.stamp_repair.run(), name="stamp-worker"))

    def _stop_workers(self) -> None:
        self.queues.shut_down()
        for task in self._workers:
            task.cancel()
        self._workers.clear()

    async def _drain_workers(self, timeout: float) -> None:
        """Let in-flight reconciles finish (graceful shutdown), then cancel the rest."""
        self.queues.shut_down()
        if self._workers:
            _, pending = await asyncio.wait(self._workers, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._workers.clear()

    def _check_synced(self) -> None:
        self.readiness.check()

    async def _housekeeping(self) -> None:
        while True:
            for informer in self.supervisor.degraded():
                self.intake.status(informer)  # a first list failing for too long
            self._check_synced()
            self.stamp_repair.ledger.prune()
            self.gauges.count_work()
            self.gauges.refresh()
            await asyncio.sleep(2.0)

    # -- running ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start discovery, informers, the elector and the background loops."""
        # The first lists and the first full resync allocate hundreds of
        # thousands of long-lived, acyclic objects (the cache): the cyclic
        # collector would rescan them again and again (measured in the
        # benchmark: the 20 Pod pages took 1.77 s of CPU to decode instead of
        # 0.30 s). Collection is paused until the caches are synced, then the
        # cache is frozen out of the collector's generations.
        if gc.isenabled():
            gc.disable()
            self._tasks.append(asyncio.create_task(self._resume_gc(), name="gc"))
        await self.supervisor.supervise_once()
        self._tasks.append(asyncio.create_task(self.supervisor.run(), name="supervisor"))
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="housekeeping"))
        if self.signer.signing is not None and self.signer.signing.path:
            self._tasks.append(asyncio.create_task(self.signer.watch(), name="signing-key"))
        if self.elector is not None:
            self._tasks.append(asyncio.create_task(self.elector.run(), name="elector"))
        else:
            self._leadership(True)

    async def _resume_gc(self, *, limit: float = 120.0) -> None:
        try:
            async with asyncio.timeout(limit):
                await self.synced.wait()
        except TimeoutError:
            pass
        finally:
            # The cache is built: freeze it out of the collector's generations (a
            # freeze moves them, it scans nothing) and collect again, so that the
            # garbage of the first resync's writes (10,000 requests at 10x, each
            # leaving reference cycles) does not pile up until it ends (BENCHMARKS.md;
            # measured: the writes then add 6 MiB to the 512 MiB the cache holds).
            gc.freeze()
            gc.enable()
            log.debug("garbage collection resumed", extra={"frozen": gc.get_freeze_count()})
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                await self.docs.wait_idle()
        gc.collect()
        gc.freeze()  # and what the first resync added to the cache (our ConfigMaps)

    async def stop(self, *, grace: float = 5.0) -> None:
        """Graceful shutdown: finish in-flight reconciles, release the Lease, stop watching."""
        # The queues close first (no new work) while the Lease is still ours, so
        # a reconcile in flight may finish its writes; then nobody writes.
        await self._drain_workers(grace)
        self._leading = False
        if self.exporter is not None:
            await self.exporter.stop()
        if self.resync.task is not None:
            self._tasks.append(self.resync.task)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.elector is not None:
            # Called with the writers stopped: nobody writes once the Lease is free.
            await self.elector.release()
        await self.supervisor.stop()
