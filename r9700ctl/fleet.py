"""Fleet-level judging: each node's figures against the fleet's median (docs/validation.md C12).

The agent judges what one node can judge; only the controller sees every node. Per (check id,
subject kind, metric), a node's figure is its weakest one (the slowest GPU, the slowest pair),
and robust z = (x - median) / (1.4826 * MAD) (r9700ctl.agent.stats, the one statistics module)
says how far it sits from the fleet. A node in
the bad direction beyond the WARN z gets WARN FLEET_OUTLIER, beyond the FAIL z FAIL (3 and 5,
thresholds.yaml `fleet.*` in models.default, read by the caller: `limits`). With fewer nodes than
`fleet.min_nodes` or no spread at all (MAD 0) there is nothing to compare against: no fleet verdict.

Pure standard library: it reads the agents' report dicts and returns CheckResults. Fleet
verdicts are PASS/WARN/FAIL against the fleet only; a node's own INCONCLUSIVE figures are left
out of the comparison (a busy or unjudged figure says nothing about the card).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent import codes, stats
from r9700ctl.agent.result import FAIL, NOT_JUDGED, PASS, WARN, CheckResult

LIMIT_KEYS = ("min_nodes", "warn_z", "fail_z")  # models.default.fleet in thresholds.yaml
HIGHER_IS_BETTER = frozenset({"GB/s", "TFLOPS", "x"})  # bandwidths, throughput, speed-ups
LOWER_IS_BETTER = frozenset({"ms", "us", "s"})  # latencies and durations
OUTLIER = "FLEET_OUTLIER"
_GPU_INDEX = re.compile(r"gpu\d+")


@dataclass(frozen=True)
class Limits:
    """The fleet rule's numbers, from thresholds.yaml (no values in the code)."""

    min_nodes: int
    warn_z: float
    fail_z: float


def limits(thresholds_document: Mapping[str, Any]) -> Limits:
    """`fleet.*` of models.default in a thresholds document (thresholds.yaml as parsed); a missing
    key is a ValueError naming it (a broken shipped file, caught by the tests)."""
    section = ((thresholds_document.get("models") or {}).get("default") or {}).get("fleet") or {}
    missing = [key for key in LIMIT_KEYS if section.get(key) is None]
    if missing:
        raise ValueError(f"thresholds.yaml: models.default.fleet lacks {', '.join(missing)}")
    return Limits(int(section["min_nodes"]), float(section["warn_z"]), float(section["fail_z"]))


@dataclass(frozen=True)
class MetricKey:
    check: str
    subject_kind: str  # "gpu", "gpu->gpu", "node", ...: GPU indices dropped
    metric: str
    unit: str

    @property
    def higher_is_better(self) -> bool:
        return self.unit in HIGHER_IS_BETTER


@dataclass
class FleetJudgement:
    results: list[CheckResult] = field(default_factory=list)
    compared: int = 0  # metrics with a fleet verdict
    note: str = ""  # why there is no fleet verdict, said once


def subject_kind(subject: str) -> str:
    return _GPU_INDEX.sub("gpu", subject)


def node_figures(report: Mapping[str, Any]) -> dict[MetricKey, tuple[float, str]]:
    """A node's weakest figure per metric key, with the subject it came from."""
    figures: dict[MetricKey, tuple[float, str]] = {}
    for result in report.get("results") or []:
        if not isinstance(result, Mapping):
            continue
        value, unit = result.get("value"), str(result.get("unit") or "")
        if unit not in HIGHER_IS_BETTER | LOWER_IS_BETTER or not _is_number(value):
            continue
        if result.get("status") in NOT_JUDGED:
            continue  # not a figure of the card (busy GPU, too few windows, a crashed step)
        key = MetricKey(
            check=str(result.get("id", "")),
            subject_kind=subject_kind(str(result.get("subject", ""))),
            metric=str(result.get("metric", "")),
            unit=unit,
        )
        number = float(value)
        known = figures.get(key)
        worse = known is None or (number < known[0] if key.higher_is_better else number > known[0])
        if worse:
            figures[key] = (number, str(result.get("subject", "")))
    return figures


def judge_fleet(reports: Mapping[str, Mapping[str, Any]], rule: Limits) -> FleetJudgement:
    """Judge each node's figures against the fleet; `reports` maps node name -> agent report."""
    per_node = {node: node_figures(report) for node, report in reports.items()}
    keys = sorted({key for figures in per_node.values() for key in figures}, key=_sort_key)
    judgement = FleetJudgement()
    no_spread = 0
    for key in keys:
        values = {node: figures[key] for node, figures in per_node.items() if key in figures}
        if len(values) < rule.min_nodes:
            continue
        numbers = [number for number, _ in values.values()]
        median = stats.median(numbers)
        if stats.robust_z(median, numbers) is None:  # MAD 0: no spread to measure a distance against
            no_spread += 1
            continue
        judgement.compared += 1
        for node, (number, subject) in values.items():
            z = stats.robust_z(number, numbers)
            assert z is not None  # the spread is the same for every node of this key
            judgement.results.append(_verdict(node, subject, key, number, median, z, rule))
    if judgement.compared == 0:
        judgement.note = _no_verdict_note(len(reports), no_spread, rule.min_nodes)
    return judgement


def _verdict(
    node: str, subject: str, key: MetricKey, value: float, median: float, z: float, rule: Limits
) -> CheckResult:
    bad_z = -z if key.higher_is_better else z  # > 0 means worse than the fleet
    status = FAIL if bad_z > rule.fail_z else WARN if bad_z > rule.warn_z else PASS
    direction = "higher" if key.higher_is_better else "lower"
    hint = ""
    if status != PASS:
        said = f"{node} {subject} {value:g} {key.unit} vs fleet median {median:g} {key.unit} (z={z:+.1f})"
        hint = codes.hint(OUTLIER, said, check=key.check)
    return CheckResult(
        id=f"fleet.{key.check}",
        subject=f"{node}:{subject}",
        status=status,
        metric=key.metric,
        value=round(value, 4),
        unit=key.unit,
        threshold=(
            f"robust z, bad direction: WARN > {rule.warn_z:g}, FAIL > {rule.fail_z:g} ({direction} is better)"
        ),
        hint=hint,
        evidence={
            "node": node,
            "subject_kind": key.subject_kind,
            "fleet_median": median,
            "z": round(z, 3),
        },
        code=OUTLIER,
    )


def _no_verdict_note(nodes: int, no_spread: int, min_nodes: int) -> str:
    if nodes < min_nodes:
        return f"no fleet comparison: {nodes} node(s) with a report, it needs at least {min_nodes}"
    if no_spread:
        return "no fleet comparison: every shared figure is identical across nodes (MAD 0)"
    return f"no fleet comparison: no figure in GB/s, TFLOPS, x or ms was measured on {min_nodes}+ nodes"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _sort_key(key: MetricKey) -> tuple[str, str, str, str]:
    return (key.check, key.subject_kind, key.metric, key.unit)
