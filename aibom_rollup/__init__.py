"""aibom-rollup: the command line and the `kubectl aibom` plugin, the top floor.

It starts the webhook, the annotator and certs; see docs/architecture.md.
"""
