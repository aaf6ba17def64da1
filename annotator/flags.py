"""The annotator's flags (`aibom-rollup annotator --help`), their bounds, and the
one `Options` object they make: the controller's `Settings` and election, and
what the process needs to reach the cluster and serve its endpoints."""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aibom_core.walk import MAX_DEPTH_LIMIT
from aibom_edge import options
from aibom_edge.reflector import DEFAULT_PAGE_SIZE, MAX_WATCH_TIMEOUT
from annotator.configmap import MAX_DATA_BYTES
from annotator.export import configure_parser as configure_export
from annotator.export import export_of
from annotator.lease import ElectionConfig
from annotator.settings import STAMP_MODES, Settings
from annotator.signing import configure_parser as configure_signing
from annotator.signing import signing_of


def _default_identity() -> str:
    # In a Deployment, POD_NAME comes from the downward API (manifests/annotator).
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    api = p.add_argument_group("cluster")
    options.add_cluster_options(api)
    options.add_namespace_label_option(
        api, help_text="namespaces carrying this label get documents"
    )

    lead = p.add_argument_group("leader election (coordination.k8s.io/v1 Lease)")
    lead.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect a leader among replicas; only the leader writes (default: on)",
    )
    lead.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "aibom-system"),
        metavar="NS",
        help="namespace of the Lease (default: $POD_NAMESPACE or %(default)s)",
    )
    lead.add_argument(
        "--lease-name",
        default="aibom-rollup-annotator",
        metavar="NAME",
        help="name of the Lease (default: %(default)s)",
    )
    lead.add_argument(
        "--identity",
        default=None,
        metavar="ID",
        help="this replica's holder identity (default: $POD_NAME, else host-pid)",
    )
    options.add_seconds(
        lead,
        "--lease-duration",
        15,
        "a standby waits this long on a silent leader (the Lease's leaseDurationSeconds; more than"
        " --renew-deadline)",
        whole=True,
    )
    options.add_seconds(
        lead,
        "--renew-deadline",
        10.0,
        "the leader steps down after failing to renew this long (less than --lease-duration)",
    )
    options.add_seconds(
        lead, "--retry-period", 2.0, "between Lease reads/renewals (less than --renew-deadline)"
    )

    work = p.add_argument_group("work")
    work.add_argument(
        "--workers",
        type=int,
        default=16,
        metavar="N",
        help="concurrent document reconciles, and so at most this many document writes in "
        "flight (default: 16)",
    )
    work.add_argument(
        "--write-qps",
        type=float,
        default=500.0,
        metavar="QPS",
        help="API writes per second, all kinds together (default: 500). A cap, not a "
        "target: --workers bounds the writes in flight, so a slow API server gets fewer; "
        "a first install writes one document per root (docs/annotator.md, Write rate)",
    )
    work.add_argument(
        "--write-burst",
        type=int,
        default=500,
        metavar="N",
        help="burst of --write-qps (default: 500)",
    )
    work.add_argument(
        "--stamp-repair",
        choices=STAMP_MODES,
        default="opted-in",
        help="where stale aibom.dev/ stamps are patched: opted-in namespaces, all, or off "
        "(default: %(default)s)",
    )
    work.add_argument(
        "--stamp-qps",
        type=float,
        default=10.0,
        metavar="QPS",
        help="stamp repair patches per second (default: 10)",
    )
    work.add_argument(
        "--stamp-burst",
        type=int,
        default=50,
        metavar="N",
        help="burst of --stamp-qps (default: 50)",
    )
    options.add_seconds(
        work,
        "--stamp-settle",
        2.0,
        "from an object's change to the judging of its stamp, so the cache can catch up with what "
        "the webhook saw live",
    )
    options.add_seconds(
        work,
        "--rediscovery-interval",
        30.0,
        "between API discovery runs: CRDs installed later are watched without a restart",
    )
    options.add_seconds(
        work,
        "--sync-timeout",
        30.0,
        "a kind whose first list still fails after this long stops holding up the others: walks "
        "through it end unresolved (Timeout) until it lists",
    )
    work.add_argument(
        "--page-size",
        type=int,
        default=DEFAULT_PAGE_SIZE,
        metavar="N",
        help=f"objects per LIST page (default: {DEFAULT_PAGE_SIZE}; what a list costs "
        "kube-apiserver varies more between runs than between page sizes, BENCHMARKS.md; "
        "two pages are held in memory at once)",
    )
    work.add_argument(
        "--max-document-bytes",
        type=int,
        default=MAX_DATA_BYTES,
        metavar="N",
        help="ConfigMap data budget: larger documents are gzip-compressed, and cut (with "
        "aibom.truncated properties and an Event) if even that does not fit (default: "
        "%(default)s, the API server's 1 MiB limit and the most allowed; lower it to test "
        f"or to leave room, down to {MIN_DOCUMENT_BYTES})",
    )
    options.add_seconds(
        work, "--watch-timeout", 300, "server-side watch timeout before a resume", whole=True
    )
    options.add_seconds(
        work,
        "--watch-idle-timeout",
        90.0,
        "a watch that sends nothing (no event, no bookmark) for this long is taken for a dead "
        "connection and restarted from its last resourceVersion; the API server sends a bookmark "
        "about once a minute",
    )
    work.add_argument(
        "--api-retries",
        type=int,
        default=10,
        metavar="N",
        help="times a request answered 429 (or 5xx) with Retry-After is retried after "
        "the time the server asked for, within the request's timeout (default: 10, as "
        "client-go; 0: never)",
    )

    ops = p.add_argument_group("operations")
    ops.add_argument(
        "--bind-address",
        default="0.0.0.0",
        metavar="ADDR",
        help="address of the metrics and health servers (default: %(default)s)",
    )
    ops.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        metavar="PORT",
        help="port of /metrics (default: 8080; 0 picks a free one)",
    )
    ops.add_argument(
        "--health-port",
        type=int,
        default=8081,
        metavar="PORT",
        help="port of /healthz and /readyz (default: 8081; may equal --metrics-port)",
    )
    options.add_log_options(ops)
    prov = p.add_argument_group("provenance (which controller references count)")
    options.add_provenance_key_option(
        prov,
        help_text="the webhook's edge-proof key (the same file; base64 text as `aibom-rollup "
        "certs` writes provenance.key). Outside guarded namespaces only edges whose "
        "aibom.dev/edge-proof verifies with it are followed; without it, none are",
    )
    prov.add_argument(
        "--trust-owner-references",
        action="store_true",
        help="follow every controller reference as written, proven or not (the behaviour "
        "before provenance; only for clusters that enforce the rule another way). "
        "Documents then carry no aibom.provenance.guarded property (nothing was checked)",
    )
    configure_signing(p)
    configure_export(p)
    options.add_core_options(p)


# A document cut to no components still carries its root and the truncation
# note (~0.5 KiB gzip-compressed; more with long names or a signature).
MIN_DOCUMENT_BYTES = 2048


class Limits(BaseModel):
    """The bounds of the annotator's numeric flags (field `write_qps` is `--write-qps`)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    workers: int = Field(ge=1)
    write_qps: float = Field(gt=0)
    write_burst: int = Field(ge=1)  # the bucket reserves: any burst >= 1 keeps the rate
    stamp_qps: float = Field(gt=0)
    stamp_burst: int = Field(ge=1)
    stamp_settle: float = Field(ge=0)
    rediscovery_interval: float = Field(gt=0)
    sync_timeout: float = Field(gt=0)
    page_size: int = Field(ge=1)
    max_document_bytes: int = Field(ge=MIN_DOCUMENT_BYTES, le=MAX_DATA_BYTES)
    watch_timeout: int = Field(ge=1, le=MAX_WATCH_TIMEOUT)
    watch_idle_timeout: float = Field(gt=0)
    api_retries: int = Field(ge=0)
    leader_elect: bool
    lease_duration: int = Field(ge=1)  # the Lease stores whole seconds
    renew_deadline: float = Field(gt=0)
    retry_period: float = Field(gt=0)
    metrics_port: int = Field(ge=0, le=65535)
    health_port: int = Field(ge=0, le=65535)
    max_depth: int = Field(ge=1, le=MAX_DEPTH_LIMIT)

    @model_validator(mode="after")
    def _lease_timings_fit(self) -> Self:
        # annotator.leader: the leader stops writing at the renew deadline, a
        # standby takes over only after the lease duration; the gap is the margin.
        if self.leader_elect and not self.renew_deadline < self.lease_duration:
            raise ValueError(
                f"--renew-deadline ({self.renew_deadline:g}) must be less than "
                f"--lease-duration ({self.lease_duration}): the leader must stop writing "
                "before a standby may take the Lease over"
            )
        if self.leader_elect and not self.retry_period < self.renew_deadline:
            raise ValueError(
                f"--retry-period ({self.retry_period:g}) must be less than --renew-deadline "
                f"({self.renew_deadline:g}): the leader needs a retry before it steps down"
            )
        return self


def settings_of(args: argparse.Namespace) -> tuple[Settings, ElectionConfig | None]:
    options.flags_in_bounds(Limits, args)
    try:
        signing = signing_of(args)
        export = export_of(args)
    except ValueError as exc:
        raise options.UsageError(str(exc)) from None
    settings = Settings(
        registry=options.registry_of(args),
        tool_version=options.tool_version(),
        keys=options.keys_of(args),
        namespace_label=options.namespace_label_of(args),
        max_depth=int(args.max_depth),
        workers=args.workers,
        page_size=args.page_size,
        watch_timeout=args.watch_timeout,
        rediscovery_interval=args.rediscovery_interval,
        stamp_mode=args.stamp_repair,
        stamp_settle=args.stamp_settle,
        write_qps=args.write_qps,
        write_burst=args.write_burst,
        stamp_qps=args.stamp_qps,
        stamp_burst=args.stamp_burst,
        size_limit=args.max_document_bytes,
        sync_timeout=args.sync_timeout,
        watch_idle_timeout=args.watch_idle_timeout,
        provenance_key=options.provenance_key_of(args),
        trust_owner_references=args.trust_owner_references,
        signing=signing,
        export=export,
    )
    election = None
    if args.leader_elect:  # Limits checked the timings; the identity is never empty
        election = ElectionConfig(
            identity=args.identity or _default_identity(),
            namespace=args.lease_namespace,
            name=args.lease_name,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
    return settings, election


@dataclass(frozen=True)
class Options:
    """Everything the flags say, checked: what the controller is told (`settings`,
    `election`: None without --leader-elect) and what the process itself needs."""

    settings: Settings
    election: ElectionConfig | None
    kubeconfig: str | None
    context: str | None
    api_retries: int
    bind_address: str
    metrics_port: int
    health_port: int
    log_level: str
    log_format: str


def options_of(args: argparse.Namespace) -> Options:
    """The flags as one object; `options.UsageError` (exit 2) when they are wrong."""
    settings, election = settings_of(args)
    return Options(
        settings=settings,
        election=election,
        kubeconfig=args.kubeconfig,
        context=args.context,
        api_retries=args.api_retries,
        bind_address=args.bind_address,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        log_level=args.log_level,
        log_format=args.log_format,
    )
