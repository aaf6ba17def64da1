"""The annotator: one AIBOM ConfigMap per root, kept true as the cluster changes.

Layers, top-down (each may import the ones below it, never the other way):

- ``main``: the ``aibom-rollup annotator`` command (logging, signals, the
  probes and the controller); ``flags``: its flags, their bounds and the one
  ``Options`` they make.
- ``controller``: builds the parts below and wires them together (one cache,
  the work queues, the writer, the leader elector); runs leadership and the
  workers. Its parts, one job each:
  ``informers`` (the supervisor: rediscovery, one informer per wanted kind),
  ``intake`` (the informers' sink: events into the cache, dirty keys into the
  queues, the full resync), ``resync`` (when a full resync converged),
  ``documents`` (the document reconciler: render, sign, fit, export, write,
  sweep), ``stamps`` (the stamp reconciler), ``guardwatch`` (whether the
  provenance guard is ours), ``gauges`` (the current-state gauges).
- ``settings``: the controller's ``Settings``, read by every part.
- ``signing``: the signing key, its publishing and its rotation (``Signer``).
- ``informer``: list+watch of one resource (resourceVersion, bookmarks,
  relist on 410 Gone, backoff), feeding ``cache``.
- ``leader``: Lease-based leader election (the async driver of a pure
  state machine in ``lease``).
- ``writer``: every write the annotator makes (server-side apply of
  ConfigMaps, preconditioned deletes, stamp merge patches, Events), gated on
  leadership and counted.
- ``probes``: ``/metrics``, ``/healthz``, ``/readyz`` (aiohttp), and the
  readiness they report.
- ``metrics``: Prometheus collectors (log lines: ``aibom_edge.logs``, shared);
  ``notices``: warnings logged once per cause.
- Pure, no I/O and no ``await`` (held to it by ``lint-imports``, as the core
  is): ``cache`` (the watch-fed state: ownership graph, namespaces, our
  ConfigMaps; which keys an event dirties), ``plan`` (what one reconcile must
  write and delete), ``configmap`` (the ConfigMap body, size handling),
  ``lease`` (the election rules), ``ledger`` (which stamp repairs keep being
  undone; the clock is passed in), ``keys``.
- No I/O, but not pure: ``workqueue`` (de-duplicating queue with per-item
  backoff and a token bucket: synchronous rules with an injected clock, and
  the ``await`` of ``get`` around them), ``slim`` (what of an object we keep
  in memory, decoded by aibom_edge.schema).

Rules: a reconcile reads only the cache (it costs no LIST); only the leader
writes; a child's document is deleted only after the document of the root
that supersedes it was written; the event loop never waits on a synchronous
call. It must never import ``webhook`` (checked by ``lint-imports``).
"""
