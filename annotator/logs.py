"""Structured log lines: the shared `aibom_rollup.logs` (one format for both processes)."""

from aibom_edge.logs import JsonFormatter, TextFormatter, configure

__all__ = ["JsonFormatter", "TextFormatter", "configure"]
