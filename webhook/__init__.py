"""The mutating admission webhook: stamps every admitted workload with its root.

Layers, top-down (each may import the ones below it, never the other way):

- ``main``: the ``aibom-rollup webhook`` command (flags, logging, signals).
- ``app``: the aiohttp application (HTTP edge: body limit, Content-Type,
  status codes, health, metrics endpoint) and the admission handler.
- ``tls``: the serving certificate, re-read when its files change.
- ``resolver``: drives the pure core walk with live, deadline-bounded,
  cached owner GETs.
- ``admission``: AdmissionReview parsing and response construction. Pure.
- ``metrics``: the Prometheus collectors.

It never denies: every failure becomes an annotation, a metric and a log
line, and a bug in this package still yields ``allowed: true``. It must never
import ``annotator`` (checked by ``lint-imports``).
"""
