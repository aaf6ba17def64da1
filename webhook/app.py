"""The HTTP edge: the aiohttp application and the admission handler.

Routes: `POST /mutate` (AdmissionReview v1), `GET /healthz` (the process
answers), `GET /readyz` (certificate loaded, API client answered, the owner
index settled, not shutting down), `GET /metrics` (Prometheus text).

HTTP errors and admission outcomes are different families: a body we
cannot read is a 4xx with a plain-text reason (the API server then applies
`failurePolicy: Ignore`, so the object is admitted anyway); a review we can
read is always answered 200 with `allowed: true`, even when our own code
fails (no patch then, and `aibom_webhook_errors_total` counts it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from aibom_core.kinds import POD, REPLICA_SET, GroupKind, KindRegistry, group_kind_of
from aibom_core.objects import Obj, annotations_of, controller_ref, metadata
from aibom_core.stamp import (
    Keys,
    Stamp,
    escape_pointer,
    mirror_agrees,
    mirror_deployment,
    read_stamp,
    stamp_of,
    stamp_patch,
)
from aibom_core.walk import Rollup
from aibom_edge.metrics import exposition
from webhook import body
from webhook.admission import (
    BadReview,
    Review,
    ReviewResponse,
    allowed,
    encode,
    patched,
)
from webhook.auth import CallerAuth
from webhook.guard import DEFAULT_BODY_TIMEOUT, ConnectionGuard, Rank
from webhook.metrics import Metrics
from webhook.provenance import Adoption, EdgeDecision, Provenance, Verdict
from webhook.resolver import Resolution, Resolver

log = logging.getLogger("webhook.admission")

# How large a review can be, and how it is read (webhook.body says why):
# 37 MiB, the object and oldObject of a 3 MiB request each JSON-escaped
# sixfold, read in bounded memory; a larger one is answered from its prefix.
MAX_BODY = body.MAX_BODY

JSON = "application/json"


@dataclass
class Readiness:
    """What /readyz reports: every condition must hold."""

    cert_loaded: bool = False
    api_ok: bool = False
    shutting_down: bool = False
    detail: dict[str, str] = field(default_factory=dict)
    # The watch-backed owner index settled (True when there is none).
    owners_settled: bool = True

    @property
    def ready(self) -> bool:
        return self.cert_loaded and self.api_ok and self.owners_settled and not self.shutting_down


class Admitter:
    """One review in, one allowed response out (with the stamp patch when needed)."""

    def __init__(
        self,
        *,
        resolver: Resolver,
        registry: KindRegistry,
        keys: Keys,
        metrics: Metrics,
        provenance: Provenance | None = None,
    ) -> None:
        self._resolver = resolver
        self._registry = registry
        self._keys = keys
        self._metrics = metrics
        # None: every controller edge is taken as written (no provenance check).
        self._provenance = provenance
        self._logged: set[tuple[str, str]] = set()

    def kind_label(self, review: Review) -> str:
        """The `kind` metric label: the request's kind when the registry knows it, else
        `other` (a label per kind a stranger invents would grow without bound)."""
        if self._registry.is_known(GroupKind(review.group, review.kind)):
            return review.kind
        return "other"

    async def admit(self, review: Review) -> tuple[ReviewResponse, str]:
        """(response, result label); raises only on bugs (the edge still admits then)."""
        obj = review.obj
        if not review.stampable or obj is None:
            return allowed(review.uid), "skipped"
        if not isinstance(obj.get("metadata"), dict):
            # Not an object the API server could send (it decoded it first):
            # no patch could apply to it.
            return allowed(review.uid), "skipped"
        gk = group_kind_of(obj)
        if not self._registry.is_known(gk):
            # Not a kind we stamp (the configuration's rules are wider than
            # the registry): leave it alone.
            return allowed(review.uid), "skipped"
        if review.sub_resource == "status" and gk == POD and review.old_obj is not None:
            # A pods/status write may change annotations (our keys included) but
            # not ownerReferences: the status strategy puts the stored ones back.
            # Stamp what will be stored.
            obj = _with_owner_references(obj, review.old_obj)
        carried = read_stamp(obj, keys=self._keys) if review.operation == "UPDATE" else None

        def cached_ok(res: Resolution) -> bool:
            """Whether owners from memory may answer (resolver doc, "Re-walk"): not
            when the object carries newer truth than they do."""
            owner = res.owner
            if (
                gk == REPLICA_SET
                and owner is not None
                and not mirror_agrees(obj, owner, keys=self._keys)
            ):
                return False  # the deployment controller's copy of a newer Deployment
            # An UPDATE carrying a stamp our cached walk would change: the
            # annotator's repair after a late adoption the cached owners
            # predate (reverting it would fight it until they expire).
            return carried is None or self._stamp(res, gk) == carried

        started = time.monotonic()
        decision = await self._decide(review, obj)
        resolution = await self._resolver.resolve(
            obj,
            namespace=review.namespace,
            cached_ok=cached_ok,
            trust=decision.trust if decision is not None else None,
            deadline=self._resolver.deadline - (time.monotonic() - started),
        )
        result = resolution.result
        m = self._metrics
        if resolution.gets:
            m.owner_lookups.labels("get").inc(resolution.gets)
        if resolution.cached:
            m.owner_lookups.labels("cache").inc(resolution.cached)
        if resolution.watched:
            m.owner_lookups.labels("watch").inc(resolution.watched)
        if resolution.shared:
            m.owner_lookups.labels("shared").inc(resolution.shared)
        if resolution.refreshed:
            m.owner_lookups.labels("refreshed").inc(resolution.refreshed)
        if result.status is Rollup.UNRESOLVED and result.failure is not None:
            self._unresolved(review, gk, str(result.failure), result.failure.reason.value)
        # A cached Deployment whose stamp disagrees with the ReplicaSet's copy
        # was refetched above (`cached_ok`): the copy may be the newer truth.
        stamp = self._stamp(resolution, gk)
        ops = stamp_patch(obj, stamp, keys=self._keys)
        if self._provenance is not None:
            ops += proof_ops(
                obj,
                decision,
                keys=self._keys,
                map_added=any(op["path"] == "/metadata/annotations" for op in ops),
            )
        if ops:
            m.patches.labels(gk.kind).inc()
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "admitted",
                extra={
                    "uid": review.uid,
                    "operation": review.operation,
                    "namespace": review.namespace,
                    "kind": gk.kind,
                    "object": result.subject.name,
                    "rollup": result.status.value,
                    "root": result.root.kind_name if result.root else None,
                    "ops": len(ops),
                    "gets": resolution.gets,
                },
            )
        return patched(review.uid, ops), result.status.value

    async def _decide(self, review: Review, obj: Obj) -> EdgeDecision | None:
        """The provenance of the object's own controller edge (None: none, or no check)."""
        if self._provenance is None:
            return None
        decision = await self._provenance.decide(
            obj,
            operation=review.operation,
            old_obj=review.old_obj,
            namespace=review.namespace,
            user_info=review.user_info,
            remaining=self._resolver.deadline,
        )
        if decision is None:
            return None
        m = self._metrics
        check = decision.check
        if check is not None:
            m.provenance_checks.labels(check.verdict.value).inc()
            if check.cached:
                m.provenance_cache_hits.inc()
            if check.verdict is not Verdict.ALLOWED:
                user = (review.user_info or {}).get("username")
                log.log(
                    logging.INFO if check.verdict is Verdict.ERROR else logging.DEBUG,
                    "controller edge not proven; not followed, stamped unproven",
                    extra={
                        "namespace": review.namespace,
                        "kind": review.kind,
                        "object": review.name or _name(review),
                        "user": user,
                        "result": check.verdict.value,
                        "detail": check.detail,
                    },
                )
        elif decision.kept:
            m.provenance_checks.labels("kept").inc()
        if decision.adoption is not None:
            m.adoptions.labels(decision.adoption.value).inc()
            if decision.adoption is not Adoption.MATCHING:
                log.info(
                    "controller reference added to an existing object that is not its "
                    "owner's template (or the template could not be read): not absorbed",
                    extra={
                        "namespace": review.namespace,
                        "kind": review.kind,
                        "object": review.name or _name(review),
                        "user": (review.user_info or {}).get("username"),
                        "result": decision.adoption.value,
                    },
                )
        return decision

    def _stamp(self, resolution: Resolution, gk: GroupKind) -> Stamp:
        """The stamp a walk gives the admitted object (a ReplicaSet mirrors its Deployment)."""
        result = resolution.result
        return mirror_deployment(
            stamp_of(result),
            subject=gk,
            owner=resolution.owner,
            keys=self._keys,
            first_hop=result.chain[0] if result.chain else None,
        )

    def _unresolved(self, review: Review, gk: GroupKind, reason_text: str, reason: str) -> None:
        self._metrics.unresolved.labels(gk.kind, reason).inc()
        key = (str(gk), reason)
        first = key not in self._logged
        self._logged.add(key)
        # Once per (kind, reason) at INFO; the rest at DEBUG, or a missing
        # permission would log on every admission.
        log.log(
            logging.INFO if first else logging.DEBUG,
            "walk unresolved; object admitted, stamped unresolved",
            extra={
                "kind": str(gk),
                "reason": reason,
                "rollup_reason": reason_text,
                "namespace": review.namespace,
                "object": review.name or _name(review),
                "first": first,
            },
        )


def proof_ops(
    obj: Obj, decision: EdgeDecision | None, *, keys: Keys, map_added: bool = False
) -> list[dict[str, Any]]:
    """JSONPatch ops that make the object carry exactly the decided proof (removed
    when there is none: a user-written value never survives), and the name the
    proof binds when the API server would only generate it later.

    The proof goes under `Keys.proof_key`: a ReplicaSet controlled by a
    Deployment keeps its own under `replicaset-edge-proof` and leaves
    `edge-proof` to the deployment controller, which copies the Deployment's
    there (overwriting that copy would loop, as the stamp would).
    """
    want = decision.proof if decision is not None else None
    ops: list[dict[str, Any]] = []
    if decision is not None and decision.name and want is not None:
        ops.append({"op": "add", "path": "/metadata/name", "value": decision.name})
    owner = controller_ref(obj)
    subject = group_kind_of(obj)
    target = keys.proof_key(subject, owner.group_kind) if owner else keys.edge_proof
    current = annotations_of(obj)
    for key in (keys.edge_proof, keys.replicaset_edge_proof):
        path = f"/metadata/annotations/{escape_pointer(key)}"
        value = want if key == target else None
        if key != target and target == keys.replicaset_edge_proof:
            continue  # the Deployment's copy: the deployment controller's, not ours
        if value is None:
            if key in current:
                ops.append({"op": "remove", "path": path})
        elif current.get(key) != value:
            if not map_added and not isinstance(metadata(obj).get("annotations"), dict):
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
                map_added = True
            ops.append({"op": "add", "path": path, "value": value})
    return ops


def _with_owner_references(obj: Obj, source: Obj) -> Obj:
    refs = metadata(source).get("ownerReferences")
    meta = {k: v for k, v in metadata(obj).items() if k != "ownerReferences"}
    if refs is not None:
        meta["ownerReferences"] = refs
    return {**obj, "metadata": meta}


def _name(review: Review) -> str:
    meta = (review.obj or {}).get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "")


def _plain(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


def make_app(
    *,
    admitter: Admitter,
    metrics: Metrics,
    readiness: Readiness,
    max_body: int = MAX_BODY,
    clock: Callable[[], float] = time.perf_counter,
    guard: ConnectionGuard | None = None,
    auth: CallerAuth | None = None,
    budget: body.BodyBudget | None = None,
) -> web.Application:
    """The aiohttp application (no listening socket: `main` or a test client adds that).

    `guard` (webhook.guard) bounds the body read (408 after its
    `body_timeout`) and learns which connections are answering a review.
    `budget`: bytes of large bodies held at once (webhook.body).
    """
    body_timeout = guard.body_timeout if guard is not None else DEFAULT_BODY_TIMEOUT
    budget = budget if budget is not None else body.BodyBudget(max(body.BUDGET, 2 * max_body))

    async def mutate(request: web.Request) -> web.Response:
        start = clock()
        if auth is not None and (why := auth.refusal(request)) is not None:
            # A stranger: no answer about owners, and no work (body unread).
            metrics.bad_requests.labels("401").inc()
            log.debug("caller refused: %s", why, extra={"peer": str(request.remote)})
            refused = _plain(401, f"unauthorized: {why}")
            if auth.token_file is not None:
                refused.headers["WWW-Authenticate"] = "Bearer"
            refused.force_close()
            return refused
        if auth is not None and guard is not None:
            guard.ranked(request.protocol, Rank.AUTHENTICATED)  # the API server: kept longest
        if request.content_type != JSON:
            metrics.bad_requests.labels("415").inc()
            return _plain(
                415, f"Content-Type must be {JSON}, got {request.content_type or 'none'!r}"
            )
        try:
            async with asyncio.timeout(body_timeout):
                read = await body.read_review(request, budget=budget, limit=max_body)
        except BadReview as exc:
            metrics.bad_requests.labels(str(exc.status)).inc()
            log.warning("bad admission request: %s", exc, extra={"status": exc.status})
            return _plain(exc.status, f"bad AdmissionReview: {exc}")
        except TimeoutError:
            # A body that arrives slower than the API server would wait for
            # our answer (slowloris): 408, and the connection is closed.
            metrics.bad_requests.labels("408").inc()
            if guard is not None:
                guard.cut("body-timeout")
            late = _plain(408, f"request body not received within {body_timeout:g} s")
            late.force_close()
            return late
        review = read.review
        metrics.body_bytes.observe(read.size)
        if review.partial:
            # Over the limit: answered from its prefix (the object's metadata),
            # never an error that failurePolicy Ignore would turn into "keep
            # whatever the stamp keys hold".
            metrics.partial_reviews.inc()
            log.warning(
                "admission request body over the limit: answered from its first bytes",
                extra={"uid": review.uid, "bytes": read.size, "limit": max_body},
            )
        metrics.in_flight.inc()
        if guard is not None:
            guard.answering(request.protocol, True)
        try:
            response, result = await admitter.admit(review)
        except Exception:
            # A bug in our code must not block admission: allow, unpatched.
            metrics.errors.labels("admit").inc()
            log.exception(
                "internal error answering a review; allowed without a patch",
                extra={"uid": review.uid, "kind": review.kind, "namespace": review.namespace},
            )
            response, result = allowed(review.uid), "error"
        finally:
            metrics.in_flight.dec()
            if guard is not None:
                guard.answering(request.protocol, False)
        kind = admitter.kind_label(review)
        metrics.admissions.labels(kind, review.operation, result).inc()
        metrics.admission_seconds.labels(kind, review.operation).observe(clock() - start)
        return web.Response(body=encode(response), content_type=JSON)

    async def healthz(request: web.Request) -> web.Response:
        return _plain(200, "ok")

    async def readyz(request: web.Request) -> web.Response:
        if readiness.ready:
            return _plain(200, "ok")
        missing = [
            name
            for name, ok in (
                ("certificate", readiness.cert_loaded),
                ("api", readiness.api_ok),
                ("owner-index", readiness.owners_settled),
                ("not-shutting-down", not readiness.shutting_down),
            )
            if not ok
        ]
        detail = "".join(f"\n{k}: {v}" for k, v in sorted(readiness.detail.items()))
        return _plain(503, "not ready: " + ", ".join(missing) + detail)

    async def metrics_view(request: web.Request) -> web.Response:
        return exposition(metrics.registry)

    # Small bodies are read whole (client_max_size), large ones in steps.
    app = web.Application(client_max_size=body.SMALL)
    app.router.add_post("/mutate", mutate)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_view)
    return app
