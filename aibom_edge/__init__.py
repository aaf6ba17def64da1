"""The shared I/O edge: what the command line, the webhook, the annotator and certs all use.

- ``kube``: the async raw-JSON Kubernetes API client (aiohttp), the request
  client; it builds on ``credentials`` (kubeconfig, in-cluster, exec plugin
  and OIDC tokens, client certificates), ``discovery`` (kind -> resource),
  ``watch`` (the watch stream), ``listing`` (the paged list) and ``wire``
  (media types, answers, errors).
- ``logs``: structured log lines (json, logfmt, text), one format for every process.
- ``options``: the options every command shares (kind registry, annotation
  prefix, walk depth, provenance key) and `UsageError`, the exit-2 error.
- ``files``: atomic file writes.

Layering (checked by ``lint-imports``, see docs/architecture.md): the
``aibom_rollup`` command line sits on top and starts ``webhook``,
``annotator`` and ``certs``; all of them may import this package; this
package imports only the pure core (``aibom_core``) and libraries, never the
packages above it.
"""
