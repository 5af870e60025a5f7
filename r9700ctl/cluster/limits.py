"""The cluster judge's numbers: `cluster.*` of models.default in data/thresholds.yaml, nothing in code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ClusterLimits:
    bandwidth_warn_fraction_of_line: float
    bandwidth_fail_fraction_of_line: float
    clock_skew_warn_s: float
    clock_skew_fail_s: float
    blame_min_good_partners: int
    busbw_warn_fraction_of_network: float
    busbw_fail_fraction_of_network: float


def limits(thresholds_document: Mapping[str, Any]) -> ClusterLimits:
    """From a thresholds document (thresholds.yaml as parsed, or an operator's override merged over
    it); a missing key is a ValueError naming it (a broken shipped file, caught by the tests)."""
    section = ((thresholds_document.get("models") or {}).get("default") or {}).get("cluster") or {}
    names = [f.name for f in fields(ClusterLimits)]
    missing = [name for name in names if section.get(name) is None]
    if missing:
        raise ValueError(f"thresholds.yaml: models.default.cluster lacks {', '.join(missing)}")
    values: dict[str, Any] = {}
    for field in fields(ClusterLimits):
        values[field.name] = int(section[field.name]) if field.type == "int" else float(section[field.name])
    return ClusterLimits(**values)
