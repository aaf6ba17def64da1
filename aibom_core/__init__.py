"""The pure core of aibom-rollup.

Everything here is data in, data out: the tracked-kind registry, the
UID-checked owner walk, the descendant closure, the per-kind scrapers, the
digest resolver and the AIBOM builder. It must never do I/O, talk to the
Kubernetes API, await, read the clock or draw random numbers: the webhook,
the annotator and the offline CLI are the edges that do. The rule is enforced
by the import-linter contract in pyproject.toml.
"""
