"""Which namespaces aibom-rollup serves, and which the provenance guard covers. Pure.

A namespace is opted in when it carries the opt-in label: `aibom.dev/enabled=true`
unless the webhook and the annotator are given another (`--namespace-label
KEY=VALUE`). The guard's ValidatingAdmissionPolicyBinding (`aibom_core.guard`)
selects the default label, and leaves out an opted-in namespace labelled
`aibom.dev/provenance-guard=disabled`. Every process reads the labels here, so
the webhook, the annotator, the offline scan and the policy agree on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

OPT_IN_LABEL: Final = "aibom.dev/enabled"
OPT_IN_VALUE: Final = "true"
#: (key, value) of the default opt-in label.
DEFAULT_OPT_IN: Final = (OPT_IN_LABEL, OPT_IN_VALUE)
OPT_OUT_LABEL: Final = "aibom.dev/provenance-guard"
OPT_OUT_VALUE: Final = "disabled"


def parse_label(spec: str) -> tuple[str, str]:
    """`key=value` (or a bare `key`, meaning `key=true`); ValueError on an empty key."""
    key, sep, value = spec.partition("=")
    key, value = key.strip(), value.strip()
    if not key:
        raise ValueError(f"must look like KEY=VALUE, got {spec!r}")
    return key, (value if sep else OPT_IN_VALUE)


def opted_in(labels: Mapping[str, str] | None, label: tuple[str, str] = DEFAULT_OPT_IN) -> bool:
    """Whether a namespace with these labels carries the opt-in `label`."""
    return labels is not None and labels.get(label[0]) == label[1]


def guard_opted_out(labels: Mapping[str, str] | None) -> bool:
    """Whether a namespace with these labels is left out of the provenance guard."""
    return labels is not None and labels.get(OPT_OUT_LABEL) == OPT_OUT_VALUE
