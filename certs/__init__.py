"""`aibom-rollup certs`: a CA, the webhook's serving certificate, its configuration.

- ``pki``: key and certificate generation with `cryptography` (no I/O; the
  clock is an argument).
- ``webhookconfig``: fill the caBundle and clientConfig into the
  MutatingWebhookConfiguration manifest (text in, text out).
- ``main``: the command (files, flags, output).
"""
