"""The webhook's Prometheus collectors, on a registry of their own (one per app).

Names follow docs/webhook.md: `aibom_rollup_unresolved_total{kind,reason}` is
shared with the annotator; the rest are `aibom_webhook_*`. Label values are
bounded: kinds come from the kind registry (the webhook only stamps known
kinds), reasons and results are enums.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from aibom_edge.metrics import Collectors

# Sub-millisecond buckets: the goal for an ownerless review is p99 <= 2 ms.
LATENCY_BUCKETS = (
    0.00025,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


class Metrics:
    """Every collector the webhook exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        c = Collectors(self.registry)
        self.admission_seconds = c.histogram(
            "aibom_webhook_admission_duration_seconds",
            "Time from reading a review to answering it, by kind and operation.",
            ["kind", "operation"],
            buckets=LATENCY_BUCKETS,
        )
        self.admissions = c.counter(
            "aibom_webhook_admissions_total",
            "Reviews answered, by kind, operation and result (the rollup status stamped, "
            "`skipped` when the object is not ours to stamp, `error` when our code failed).",
            ["kind", "operation", "result"],
        )
        self.patches = c.counter(
            "aibom_webhook_patches_total",
            "Reviews answered with a non-empty patch (the stamp was missing or wrong).",
            ["kind"],
        )
        self.unresolved = c.unresolved(
            "Walks that failed before reaching a tracked ancestor, by the admitted "
            "object's kind and the failure reason.",
        )
        self.errors = c.counter(
            "aibom_webhook_errors_total",
            "Bugs or unexpected failures in the webhook; the review was still allowed.",
            ["stage"],
        )
        self.bad_requests = c.counter(
            "aibom_webhook_bad_requests_total",
            "Requests refused at the HTTP level (no review answered), by HTTP status.",
            ["status"],
        )
        self.owner_lookups = c.counter(
            "aibom_webhook_owner_lookups_total",
            "Owner lookups of the walk: `get` (an API GET), `cache` (served from the "
            "UID-keyed owner cache), `watch` (served from the watch-backed owner index), "
            "`shared` (joined a GET already in flight), `refreshed` (a walk from memory "
            "refused because the object carried newer values; walked again with GETs).",
            ["source"],
        )
        self.owner_watch_restarts = c.counter(
            "aibom_webhook_owner_watch_restarts_total",
            "Restarts of the owner index's watches, by kind and reason: `closed` "
            "(the server ended it; resumed), `expired` (410 Gone; relisted), "
            "`continue_expired`, `error`, `idle` (silent too long; resumed).",
            ["kind", "reason"],
        )
        self.owner_watch_synced = c.gauge(
            "aibom_webhook_owner_watch_synced",
            "1 while a kind of the owner index is listed and watched (its entries answer "
            "walks), else 0 (its owners are fetched with GETs).",
            ["kind"],
        )
        self.owner_index_objects = c.gauge(
            "aibom_webhook_owner_index_objects",
            "Owners held by the watch-backed owner index (slim entries).",
        )
        self.provenance_checks = c.counter(
            "aibom_webhook_provenance_checks_total",
            "Checks of an object's own controller edge: `allowed`, `denied` "
            "(not followed, stamped unproven), `error` (review failed or timed out: "
            "stamped unproven, reason Unchecked), `kept` (an UPDATE keeping the reference: "
            "oldObject's verdict, no review).",
            ["result"],
        )
        self.body_bytes = c.histogram(
            "aibom_webhook_request_body_bytes",
            "Bytes of each AdmissionReview body read (JSON-escaped by the API server: a "
            "review can be six times the request).",
            [],
            buckets=(16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 37 << 20, 64 << 20),
        )
        self.partial_reviews = c.counter(
            "aibom_webhook_partial_reviews_total",
            "Reviews over the body limit, answered from their first bytes (the object's "
            "metadata): stamped, never left with the values a user wrote.",
        )
        self.adoptions = c.counter(
            "aibom_webhook_adoptions_total",
            "Controller references added to an existing object by an identity allowed to "
            "control the owner (adoptions): `matching` (the object runs its owner's Pod "
            "template, or the owner has none), `mismatch` (it does not: stamped unproven, "
            "reason AdoptedMismatch, never absorbed), `error` (the owner could not be read: "
            "Unchecked).",
            ["result"],
        )
        self.provenance_cache_hits = c.counter(
            "aibom_webhook_provenance_cache_hits_total",
            "Edge checks answered from the SubjectAccessReview cache.",
        )
        self.cert_reloads = c.counter(
            "aibom_webhook_cert_reloads_total",
            "Serving certificate (re)loads, by result.",
            ["result"],
        )
        self.token_reloads = c.counter(
            "aibom_webhook_client_token_reloads_total",
            "Re-reads of --client-token-file after it changed, by result (failed: "
            "no valid token in it; the previous tokens are kept).",
            ["result"],
        )
        self.connections_cut = c.counter(
            "aibom_webhook_connections_cut_total",
            "Connections closed by the edge's limits: `header-timeout`, `body-timeout`, "
            "`evicted` (a slow connection made room at the cap), `cap` (refused at the cap).",
            ["reason"],
        )
        self.cert_expiry = c.gauge(
            "aibom_webhook_serving_cert_expiry_timestamp_seconds",
            "notAfter of the serving certificate being served (Unix seconds); "
            "the CertificateExpiresSoon alert (docs/runbooks.md) compares it with time().",
        )
        self.ready = c.gauge(
            "aibom_webhook_ready",
            "1 when the certificate is loaded, the API client answered and the owner "
            "index settled.",
        )
        self.in_flight = c.gauge("aibom_webhook_reviews_in_flight", "Reviews being answered now.")
