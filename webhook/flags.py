"""The webhook's flags, and the one `Settings` built from them.

`configure_parser` declares every flag of `aibom-rollup webhook` (its help
is the command's `--help`); `settings_of` checks them (`Limits`: the bounds
of the numeric ones), reads what they name (the kind registry, the
provenance key) and returns `Settings`, which the process and its `Server`
(webhook.main) read instead of the flags.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from aibom_core.kinds import KindRegistry, default_registry
from aibom_core.stamp import Keys
from aibom_core.walk import DEFAULT_MAX_DEPTH, MAX_DEPTH_LIMIT
from aibom_edge import options
from aibom_edge.reflector import MAX_WATCH_TIMEOUT
from webhook.guard import DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS
from webhook.ownerwatch import DEFAULT_SYNC_TIMEOUT, DEFAULT_WATCH_TIMEOUT
from webhook.provenance import DEFAULT_SAR_SIZE, DEFAULT_SAR_TTL
from webhook.resolver import DEFAULT_CACHE_SIZE, DEFAULT_CACHE_TTL, DEFAULT_DEADLINE
from webhook.tls import DEFAULT_CHECK_INTERVAL

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 8443
DEFAULT_SHUTDOWN_GRACE = 20.0


def configure_parser(p: argparse.ArgumentParser) -> None:
    tls = p.add_argument_group("serving")
    tls.add_argument("--cert-file", required=True, metavar="PEM", help="serving certificate")
    tls.add_argument("--key-file", required=True, metavar="PEM", help="its private key")
    tls.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    tls.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    tls.add_argument(
        "--client-ca-file",
        metavar="PEM",
        help="authenticate the caller: /mutate answers only TLS clients presenting a "
        "certificate signed by this CA (the API server's, from its AdmissionConfiguration "
        "kubeconfig); probes and /metrics stay open",
    )
    tls.add_argument(
        "--client-token-file",
        metavar="FILE",
        help="authenticate the caller: /mutate answers only requests with "
        "`Authorization: Bearer <a token of this file>` (the API server's kubeconfig token; one "
        "per line, any accepted); re-read when it changes, every --cert-check-interval",
    )
    options.add_seconds(
        tls,
        "--cert-check-interval",
        DEFAULT_CHECK_INTERVAL,
        "how often to look for rotated certificate (and client token) files, used without a "
        "restart",
    )
    options.add_seconds(
        tls,
        "--shutdown-grace",
        DEFAULT_SHUTDOWN_GRACE,
        "on SIGTERM, how long reviews in flight may take to finish",
    )
    limits = p.add_argument_group("connection limits (slow or too many clients)")
    options.add_seconds(
        limits,
        "--header-timeout",
        DEFAULT_HEADER_TIMEOUT,
        "the TLS handshake and each request's head must arrive within this, or the connection is "
        "closed",
    )
    options.add_seconds(
        limits,
        "--body-timeout",
        DEFAULT_BODY_TIMEOUT,
        "a request body must arrive within this, or the answer is 408 and the connection is closed",
    )
    limits.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="open connections at most; a new one evicts one waiting for request data, the "
        "API server's (authenticated by --client-ca-file or --client-token-file) last "
        f"(default {DEFAULT_MAX_CONNECTIONS})",
    )
    options.add_cluster_options(p.add_argument_group("Kubernetes API"))
    walk = p.add_argument_group("walk")
    options.add_seconds(
        walk,
        "--walk-deadline",
        DEFAULT_DEADLINE,
        "the whole owner walk's budget; keep it below the webhook configuration's timeoutSeconds "
        "(hops still waiting then stamp `unresolved` / Timeout)",
    )
    options.add_seconds(
        walk,
        "--owner-cache-ttl",
        DEFAULT_CACHE_TTL,
        "how long a fetched owner may answer later walks (keyed by UID; 0 disables)",
    )
    walk.add_argument(
        "--owner-watch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="list and watch the controller-owning kinds of the registry (metadata only, "
        "slimmed; every kind but Pod) and answer owner hops from that index, UID-checked, "
        "before the TTL cache and GETs; /readyz waits until it has synced. Needs "
        "list/watch on those kinds (manifests/webhook/rbac.yaml). Default: on",
    )
    options.add_seconds(
        walk,
        "--owner-watch-timeout",
        DEFAULT_WATCH_TIMEOUT,
        "the API server ends each owner watch after this long and it is resumed from where it was",
        whole=True,
    )
    options.add_seconds(
        walk,
        "--owner-watch-sync-timeout",
        DEFAULT_SYNC_TIMEOUT,
        "readiness waits at most this long for a kind that fails to list; its owners are fetched "
        "with GETs meanwhile",
    )
    walk.add_argument(
        "--owner-cache-size",
        type=int,
        default=DEFAULT_CACHE_SIZE,
        metavar="N",
        help=f"owners kept at most, least recently used go first (default {DEFAULT_CACHE_SIZE})",
    )
    prov = p.add_argument_group("provenance (who may set a controller reference)")
    options.add_provenance_key_option(
        prov,
        help_text="key of the aibom.dev/edge-proof annotation (base64 text of 32 random bytes, "
        "as `aibom-rollup certs` writes provenance.key; the annotator needs the same "
        "file). Without it edges are still checked and stamped, but no proof is written",
    )
    options.add_seconds(
        prov,
        "--sar-cache-ttl",
        DEFAULT_SAR_TTL,
        "how long a SubjectAccessReview verdict (per identity and owner) is reused (0 disables)",
    )
    prov.add_argument(
        "--sar-cache-size",
        type=int,
        default=DEFAULT_SAR_SIZE,
        metavar="N",
        help=f"verdicts kept at most (default {DEFAULT_SAR_SIZE})",
    )
    options.add_core_options(p)
    options.add_log_options(
        p.add_argument_group("logging"),
        formats=("json", "logfmt"),
        level_help="default info: one line per unresolved (kind, reason), debug: one per review",
    )


class Limits(BaseModel):
    """The bounds of the webhook's numeric flags (field `walk_deadline` is `--walk-deadline`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    port: int = Field(gt=0, lt=65536)
    walk_deadline: float = Field(gt=0, le=30)
    owner_cache_ttl: float = Field(ge=0)
    owner_cache_size: int = Field(ge=1)
    cert_check_interval: float = Field(gt=0)
    shutdown_grace: float = Field(ge=0)
    max_depth: int = Field(ge=1, le=MAX_DEPTH_LIMIT)
    header_timeout: float = Field(gt=0, le=60)
    body_timeout: float = Field(gt=0, le=60)
    max_connections: int = Field(ge=1)
    sar_cache_ttl: float = Field(ge=0)
    sar_cache_size: int = Field(ge=1)
    owner_watch_timeout: int = Field(ge=1, le=MAX_WATCH_TIMEOUT)
    owner_watch_sync_timeout: float = Field(gt=0, le=600)


@dataclass(frozen=True, slots=True)
class Settings:
    """What the webhook runs with: every flag, checked, and what the flags name, read.

    The defaults are the flags' own. `cert_file` and `key_file` are required
    flags; a `Server` given its own certificate reloader (tests) needs neither.
    """

    # serving
    cert_file: str = ""
    key_file: str = ""
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    client_ca_file: str | None = None
    client_token_file: str | None = None
    cert_check_interval: float = DEFAULT_CHECK_INTERVAL
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    # connection limits
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    # Kubernetes API
    kubeconfig: str | None = None
    context: str | None = None
    # walk
    walk_deadline: float = DEFAULT_DEADLINE
    owner_cache_ttl: float = DEFAULT_CACHE_TTL
    owner_cache_size: int = DEFAULT_CACHE_SIZE
    owner_watch: bool = True
    owner_watch_timeout: int = DEFAULT_WATCH_TIMEOUT
    owner_watch_sync_timeout: float = DEFAULT_SYNC_TIMEOUT
    # provenance
    provenance_key: bytes | None = None
    sar_cache_ttl: float = DEFAULT_SAR_TTL
    sar_cache_size: int = DEFAULT_SAR_SIZE
    # the walk's kinds and stamp keys (--kinds, --max-depth, --annotation-prefix)
    registry: KindRegistry = field(default_factory=default_registry)
    keys: Keys = field(default_factory=Keys)
    max_depth: int = DEFAULT_MAX_DEPTH
    # logging
    log_level: str = "info"
    log_format: str = "json"


def settings_of(args: argparse.Namespace) -> Settings:
    """The parsed flags as `Settings`; UsageError for one out of bounds or a file that
    cannot be read (the kind registry, the provenance key)."""
    options.flags_in_bounds(Limits, args)
    return Settings(
        cert_file=args.cert_file,
        key_file=args.key_file,
        host=args.host,
        port=args.port,
        client_ca_file=args.client_ca_file,
        client_token_file=args.client_token_file,
        cert_check_interval=args.cert_check_interval,
        shutdown_grace=args.shutdown_grace,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        max_connections=args.max_connections,
        kubeconfig=args.kubeconfig,
        context=args.context,
        walk_deadline=args.walk_deadline,
        owner_cache_ttl=args.owner_cache_ttl,
        owner_cache_size=args.owner_cache_size,
        owner_watch=args.owner_watch,
        owner_watch_timeout=args.owner_watch_timeout,
        owner_watch_sync_timeout=args.owner_watch_sync_timeout,
        provenance_key=options.provenance_key_of(args),
        sar_cache_ttl=args.sar_cache_ttl,
        sar_cache_size=args.sar_cache_size,
        registry=options.registry_of(args),
        keys=options.keys_of(args),
        max_depth=int(args.max_depth),
        log_level=args.log_level,
        log_format=args.log_format,
    )
