"""Regression against a previous report of the node: the CVS 3-gate, standard library only.

Motivation
----------
Floors catch gross faults; a node that lost a fifth of its all-reduce bandwidth since last
month still clears them. `--baseline PREVIOUS.json` compares every higher-is-better figure
with the same check id, subject and metric in an earlier report of the agent
(docs/validation.md R-G6 and C12). Done naively, run-to-run noise becomes a false alarm, and a
comparison that compared nothing looks like a pass.

Design summary (after ROCm/cvs cvs/lib/regression_lib.py)
--------------------------------------------------------
Figures: all-reduce bus bandwidth per message size (collective.allreduce evidence), every
GB/s figure with its timed windows (host<->device, P2P, memory), TFLOPS, and the scaling
speedup (samples: one per repeat). The windows a check timed are the samples.

1. Tiered drop: the median fell by more than the tier's fraction of the baseline's median:
   busbw small (<= 1 MiB) 20%, mid (<= 64 MiB) 15%, large 7.5%; bandwidth, TFLOPS and
   speedup 7.5% (docs/validation.md C6, C10). When the baseline's own windows are noisier, the
   limit widens to 2 x their CV (R-G6: "max(tier_floor, 2 x p95 CV)").
2. Separation: p75 of this run's windows below p25 of the baseline's (the distributions barely
   overlap), so one slow window cannot make a regression.
3. Adjacency: a busbw size is confirmed only inside a run of >= 2 consecutive candidate sizes of
   its sweep (noise is isolated, real regressions span sizes); a one-size sweep needs one.
A figure is a regression (FAIL) only when every gate agrees.

Guards come first and give INCONCLUSIVE with the numbers in the reason: fewer than 3 windows
on a side; the baseline's or this run's median below the floor of its tier (busbw small 0.005,
mid 0.05, large 0.5 GB/s; bandwidth 0.5 GB/s; 0.1 TFLOPS): a relative change of nearly nothing
means nothing, and a run that measured (nearly) nothing did not pass.

Trustworthiness vs. verdict: `baseline.coverage` says how many figures were compared; none in
common is INCONCLUSIVE, never a quiet PASS. When the two reports' captured environments differ
(NCCL_P2P_DISABLE set in one of them, another torch or NCCL), every regression's hint names the
difference as the likely cause.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import codes, schemas, stats
from r9700ctl.agent.result import ERROR, FAIL, INCONCLUSIVE, PASS, SKIP, CheckResult

SCHEMA = schemas.VALIDATE  # the report.py schema this module reads
MiB = 1 << 20

REGRESSION = "REGRESSION"
BUSBW_TIERS = ("small", "mid", "large")

# thresholds.yaml `baseline.*` keys -> (config key, sub-key): the one way the shipped file and a
# --thresholds override reach the comparison.
THRESHOLD_KEYS: dict[str, tuple[str, str | None]] = {
    "baseline.busbw_small_drop": ("drop", "small"),
    "baseline.busbw_mid_drop": ("drop", "mid"),
    "baseline.busbw_large_drop": ("drop", "large"),
    "baseline.bandwidth_drop": ("drop", "bandwidth"),
    "baseline.tflops_drop": ("drop", "tflops"),
    "baseline.speedup_drop": ("drop", "speedup"),
    "baseline.busbw_small_floor_gbs": ("floor", "small"),
    "baseline.busbw_mid_floor_gbs": ("floor", "mid"),
    "baseline.busbw_large_floor_gbs": ("floor", "large"),
    "baseline.bandwidth_floor_gbs": ("floor", "bandwidth"),
    "baseline.tflops_floor": ("floor", "tflops"),
    "baseline.speedup_floor": ("floor", "speedup"),
    "baseline.noise_factor": ("noise_factor", None),
    "baseline.noise_limit_cap": ("noise_limit_cap", None),
    "baseline.min_samples": ("min_samples", None),
    "baseline.adjacency_min_run": ("adjacency_min_run", None),
    "baseline.current_percentile": ("current_percentile", None),
    "baseline.baseline_percentile": ("baseline_percentile", None),
}
SIZE_KEYS = {"baseline.busbw_small_max_mib": "small_max_bytes", "baseline.busbw_mid_max_mib": "mid_max_bytes"}
# Every thresholds.yaml key the comparison reads (the runner refuses to start without one).
REQUIRED_KEYS = frozenset(THRESHOLD_KEYS) | frozenset(SIZE_KEYS)

ENV_HINT = "likely cause: the environment differs from the baseline's ({diff})"
REGRESSED = "BASELINE_REGRESSION"
UNCONFIRMED = "BASELINE_UNJUDGED"
NOTHING_COMPARED = "BASELINE_NOTHING_IN_COMMON"
# Settings that decide the peer-to-peer path: listed first when they differ.
P2P_SETTINGS = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "HSA_FORCE_FINE_GRAIN_PCIE", "NCCL_SHM_DISABLE")
VERSION_FIELDS = ("torch", "cuda", "hip", "nccl", "rocm", "kernel")


class BaselineError(ValueError):
    """A baseline file that cannot be used: one line saying what and how to fix it (exit 64)."""


@dataclass(frozen=True)
class Figure:
    """One higher-is-better figure of a report, with the windows it is the median of."""

    check: str
    subject: str
    metric: str
    kind: str  # "busbw", "bandwidth", "tflops" or "speedup"
    value: float
    unit: str
    samples: tuple[float, ...] = ()
    size_bytes: int | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.check, self.subject, self.metric)


@dataclass
class Comparison:
    """A figure against its baseline: verdict PASS, REGRESSION or INCONCLUSIVE, with the gates."""

    reference: Figure
    current: Figure
    verdict: str
    tier: str
    limit: float
    drop: float = math.nan
    reason: str = ""
    widened: bool = False
    gates: dict[str, bool | None] = field(default_factory=dict)


# --- configuration -----------------------------------------------------------------------------


def config_from_thresholds(values: Mapping[str, Any]) -> dict[str, Any]:
    """The comparison's config from flat thresholds ("baseline.busbw_large_drop": 0.075, ...).

    Every key of REQUIRED_KEYS must be there (thresholds.yaml is the one source; no defaults here).
    """
    config: dict[str, Any] = {"drop": {}, "floor": {}}
    for name, (key, sub) in THRESHOLD_KEYS.items():
        value = values[name]
        if sub is None:
            config[key] = value
        else:
            config[key][sub] = float(value)
    for name, key in SIZE_KEYS.items():
        config[key] = int(float(values[name]) * MiB)
    return config


def size_tier(size_bytes: int, config: Mapping[str, Any]) -> str:
    """'small' | 'mid' | 'large' for an all-reduce message size."""
    if size_bytes <= config["small_max_bytes"]:
        return "small"
    if size_bytes <= config["mid_max_bytes"]:
        return "mid"
    return "large"


def tier_of(figure: Figure, config: Mapping[str, Any]) -> str:
    if figure.kind == "busbw" and figure.size_bytes is not None:
        return size_tier(figure.size_bytes, config)
    return figure.kind


def threshold_for(tier: str, config: Mapping[str, Any]) -> float:
    """Allowed drop for a tier; an unknown tier gets the tightest one (never a lenient default)."""
    drops = config["drop"]
    return float(drops[tier]) if tier in drops else float(min(drops.values()))


def floor_for(tier: str, config: Mapping[str, Any]) -> float:
    """Smallest median a relative comparison means something at; unknown tiers: the highest floor."""
    floors = config["floor"]
    return float(floors[tier]) if tier in floors else float(max(floors.values()))


# --- loading -----------------------------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    """Read and check a baseline report; BaselineError (one line) when it cannot be used."""
    where = f"--baseline {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(
            f"{where}: no such file (give the --json report of an earlier run of this node)"
        ) from None
    except IsADirectoryError:
        raise BaselineError(
            f"{where}: is a directory (give the --json report file of an earlier run)"
        ) from None
    except UnicodeDecodeError:
        raise BaselineError(f"{where}: not a text file (give the --json report of an earlier run)") from None
    except OSError as exc:
        raise BaselineError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{where}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg}); give the file an earlier run wrote "
            "with --json"
        ) from None
    return check_document(document, where)


def check_document(document: Any, where: str = "--baseline") -> dict[str, Any]:
    """The report itself when it is a validate report this agent reads, else BaselineError."""
    if not isinstance(document, dict):
        raise BaselineError(
            f"{where}: JSON, but a {type(document).__name__} rather than a validate report (schema {SCHEMA})"
        )
    schema = document.get("schema")
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("r9700ctl.validate/"):
            raise BaselineError(f"{where}: schema {schema} is not readable by this agent (it reads {SCHEMA})")
        shown = f"a {schema!r} document" if schema else "a JSON file without a schema"
        raise BaselineError(
            f"{where}: {shown}, not a validate report (schema {SCHEMA}); give the file "
            "`--json` wrote in an earlier run"
        )
    results = document.get("results")
    if not isinstance(results, list):
        raise BaselineError(f"{where}: the report has no 'results' list (truncated or edited file?)")
    for position, item in enumerate(results):
        if not (
            isinstance(item, dict)
            and isinstance(item.get("id"), str)
            and isinstance(item.get("subject"), str)
        ):
            raise BaselineError(
                f"{where}: results[{position}] has no string 'id' and 'subject' (truncated or edited file?)"
            )
    if not isinstance(document.get("environment", {}), dict):
        raise BaselineError(f"{where}: 'environment' is not an object (truncated or edited file?)")
    return document


def model_mismatch(
    document: Mapping[str, Any], current_models: Iterable[str], where: str = "--baseline"
) -> str:
    """The one-line complaint when the baseline was measured on another GPU model ("" if not)."""
    gpus = document.get("gpus") if isinstance(document.get("gpus"), list) else []
    before = sorted({str(g["model"]) for g in gpus if isinstance(g, dict) and g.get("model")})
    now = sorted({m for m in current_models if m})
    if before and now and before != now:
        return (
            f"{where}: measured on {', '.join(before)}, this node has {', '.join(now)}: figures of "
            "different GPU models are not comparable; give a report of this node's model"
        )
    return ""


# --- figures -----------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _numbers(values: Any) -> tuple[float, ...]:
    if not isinstance(values, list):
        return ()
    return tuple(v for v in (_number(x) for x in values) if v is not None)


def size_label(size_bytes: int) -> str:
    """1048576 -> '1MiB', 65536 -> '64KiB', 1000 -> '1000B' (metric names of busbw figures)."""
    if size_bytes >= MiB and size_bytes % MiB == 0:
        return f"{size_bytes // MiB}MiB"
    if size_bytes >= 1024 and size_bytes % 1024 == 0:
        return f"{size_bytes // 1024}KiB"
    return f"{size_bytes}B"


def _busbw_figures(result: Mapping[str, Any], evidence: Mapping[str, Any]) -> list[Figure]:
    out = []
    for row in evidence.get("sizes") or []:
        if not isinstance(row, dict):
            continue
        size, value = _number(row.get("size_bytes")), _number(row.get("busbw_gbs"))
        if size is None or value is None:
            continue
        out.append(
            Figure(
                check=result["id"],
                subject=result["subject"],
                metric=f"busbw_{size_label(int(size))}",
                kind="busbw",
                value=value,
                unit="GB/s",
                samples=_numbers(row.get("windows_busbw_gbs")),
                size_bytes=int(size),
            )
        )
    return out


def _speedup_samples(evidence: Mapping[str, Any]) -> tuple[float, ...]:
    """One speedup per repeat: T(1) (the table's median) over that repeat's step time."""
    table = evidence.get("table") if isinstance(evidence.get("table"), list) else []
    one = next((_number(r.get("step_ms")) for r in table if isinstance(r, dict) and r.get("n") == 1), None)
    repeats = evidence.get("repeats") if isinstance(evidence.get("repeats"), list) else []
    steps = [_number(r.get("step_ms")) for r in repeats if isinstance(r, dict)]
    if not one:
        return ()
    return tuple(one / s for s in steps if s)


def figures_of(result: Mapping[str, Any]) -> list[Figure]:
    """The higher-is-better figures one result carries (none for SKIP/ERROR or other units)."""
    if result.get("status") in (SKIP, ERROR):
        return []
    evidence = result.get("evidence") if isinstance(result.get("evidence"), dict) else {}
    if isinstance(evidence.get("sizes"), list):
        return _busbw_figures(result, evidence)
    value, unit = _number(result.get("value")), result.get("unit")
    if value is None:
        return []
    common = {"check": result["id"], "subject": result["subject"], "metric": str(result.get("metric") or "")}
    if unit == "GB/s":
        # P2P keeps its timed windows as unidirectional_windows_gbs (checks/p2p.py).
        samples = _numbers(evidence.get("windows_gbs") or evidence.get("unidirectional_windows_gbs"))
        return [Figure(**common, kind="bandwidth", value=value, unit=unit, samples=samples)]
    if unit == "TFLOPS":
        samples = _numbers(evidence.get("windows_tflops"))
        return [Figure(**common, kind="tflops", value=value, unit=unit, samples=samples)]
    if unit == "x" and result.get("metric") == "speedup":
        return [Figure(**common, kind="speedup", value=value, unit=unit, samples=_speedup_samples(evidence))]
    return []


def figures(results: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], Figure]:
    out: dict[tuple[str, str, str], Figure] = {}
    for result in results:
        if isinstance(result, Mapping) and isinstance(result.get("id"), str):
            for figure in figures_of(result):
                out[figure.key] = figure
    return out


# --- comparison --------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def compare_figure(reference: Figure, current: Figure, config: Mapping[str, Any]) -> Comparison:
    """Gates 1 and 2 with the guards; adjacency (gate 3) needs the whole sweep: `confirm_adjacent`."""
    cfg = config
    tier = tier_of(reference, cfg)
    base_limit = threshold_for(tier, cfg)
    floor = floor_for(tier, cfg)
    out = Comparison(reference, current, INCONCLUSIVE, tier, base_limit)
    need = int(cfg["min_samples"])
    n_ref, n_cur = len(reference.samples), len(current.samples)
    if n_ref < need or n_cur < need:
        out.reason = f"{n_ref} window(s) in the baseline and {n_cur} now; need >= {need} on each side"
        return out
    ref_median, cur_median = stats.median(reference.samples), stats.median(current.samples)
    unit = f" {reference.unit}" if reference.unit else ""
    if ref_median < floor:
        out.reason = (
            f"baseline median {_fmt(ref_median)}{unit} is below the {tier} floor {floor:g}{unit}: "
            "a relative change means nothing there"
        )
        return out
    if cur_median < floor:
        out.reason = (
            f"this run's median {_fmt(cur_median)}{unit} is below the {tier} floor {floor:g}{unit}: "
            f"nothing was measured (baseline {_fmt(ref_median)}{unit})"
        )
        return out
    noise = min(float(cfg["noise_factor"]) * stats.cv(reference.samples), float(cfg["noise_limit_cap"]))
    out.limit = max(base_limit, noise)
    out.widened = noise > base_limit
    out.drop = (ref_median - cur_median) / ref_median
    high_now = stats.percentile(current.samples, float(cfg["current_percentile"]))
    low_then = stats.percentile(reference.samples, float(cfg["baseline_percentile"]))
    out.gates = {"drop": out.drop > out.limit, "separation": high_now < low_then}
    out.verdict = REGRESSION if all(out.gates.values()) else PASS
    out.reason = (
        f"{_fmt(ref_median)} -> {_fmt(cur_median)}{unit} ({-out.drop:+.1%}); limit {out.limit:.1%}"
        f"{' (2 x baseline CV)' if out.widened else ''}; "
        f"p{cfg['current_percentile']:g} now {_fmt(high_now)} vs p{cfg['baseline_percentile']:g} then "
        f"{_fmt(low_then)}"
    )
    return out


def confirm_adjacent(comparisons: list[Comparison], config: Mapping[str, Any]) -> None:
    """Gate 3: a busbw regression stands only within a run of consecutive candidate sizes."""
    cfg = config
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in comparisons:
        if c.reference.kind == "busbw" and c.verdict != INCONCLUSIVE:
            groups.setdefault((c.current.check, c.current.subject), []).append(c)
    for members in groups.values():
        members.sort(key=lambda c: c.current.size_bytes or 0)
        need = min(int(cfg["adjacency_min_run"]), len(members))
        run: list[Comparison] = []
        for c in [*members, None]:
            if c is not None and c.verdict == REGRESSION:
                run.append(c)
                continue
            for member in run:
                member.gates["adjacency"] = len(run) >= need
                if len(run) < need:
                    member.verdict = PASS
                    member.reason += f"; an isolated size (needs {need} adjacent sizes): not confirmed"
            run = []
        for c in members:
            c.gates.setdefault("adjacency", None)


def compare(
    reference: Mapping[tuple[str, str, str], Figure],
    current: Mapping[tuple[str, str, str], Figure],
    config: Mapping[str, Any],
) -> list[Comparison]:
    """Every figure present in both, in the current run's order, all three gates applied."""
    comparisons = [compare_figure(reference[k], fig, config) for k, fig in current.items() if k in reference]
    confirm_adjacent(comparisons, config)
    return comparisons


# --- environment -------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def environment_differences(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between two captured environments, P2P settings first ("NCCL_P2P_DISABLE unset -> 1")."""
    vars_before = before.get("variables") if isinstance(before.get("variables"), dict) else {}
    vars_now = now.get("variables") if isinstance(now.get("variables"), dict) else {}
    names = sorted(set(vars_before) | set(vars_now), key=lambda n: (n not in P2P_SETTINGS, n))
    out = [
        f"{name} {_shown(vars_before.get(name))} -> {_shown(vars_now.get(name))}"
        for name in names
        if vars_before.get(name) != vars_now.get(name)
    ]
    for name in VERSION_FIELDS:
        if before.get(name) != now.get(name) and (before.get(name) or now.get(name)):
            out.append(f"{name} {_shown(before.get(name))} -> {_shown(now.get(name))}")
    drivers_before = before.get("drivers") if isinstance(before.get("drivers"), dict) else {}
    drivers_now = now.get("drivers") if isinstance(now.get("drivers"), dict) else {}
    for name in ("amdgpu", "nvidia"):
        if drivers_before.get(name) != drivers_now.get(name):
            out.append(f"{name} driver {_shown(drivers_before.get(name))} -> {_shown(drivers_now.get(name))}")
    return out


# --- results -----------------------------------------------------------------------------------


def _side(figure: Figure) -> dict[str, Any]:
    summary = stats.summary(figure.samples) if figure.samples else {}
    return {
        "value": figure.value,
        "median": summary.get("median"),
        "p25": stats.percentile(figure.samples, 25) if figure.samples else None,
        "p75": stats.percentile(figure.samples, 75) if figure.samples else None,
        "cv": summary.get("cv"),
        "windows": len(figure.samples),
    }


def _threshold_text(c: Comparison) -> str:
    unit = f" {c.reference.unit}" if c.reference.unit else ""
    text = (
        f"drop <= {c.limit:.1%} of the baseline {_fmt(c.reference.value)}{unit} ({c.tier} tier); "
        "FAIL needs p75 now < p25 then too"
    )
    if c.reference.kind == "busbw":
        text += " and adjacent sizes"
    return text


def comparison_result(c: Comparison, differences: list[str], source: Mapping[str, Any]) -> CheckResult:
    """The CheckResult `baseline.<metric>` for one comparison."""
    status = {REGRESSION: FAIL, INCONCLUSIVE: INCONCLUSIVE}.get(c.verdict, PASS)
    hints: list[str] = []
    if status == FAIL:
        hints.append(f"{c.current.metric} of {c.current.check} fell since the baseline: {c.reason}")
        if differences:
            hints.append(ENV_HINT.format(diff="; ".join(differences[:4])))
        else:
            hints.append(codes.next_step(REGRESSED, subject=c.current.subject))
    elif status == INCONCLUSIVE:
        hints.append(c.reason)
    elif c.gates.get("drop"):
        hints.append(f"dropped beyond the limit but not confirmed: {c.reason}")
    return CheckResult(
        id=f"baseline.{c.current.metric}",
        subject=c.current.subject,
        status=status,
        metric=c.current.metric,
        value=round(c.current.value, 3),
        unit=c.current.unit,
        threshold=_threshold_text(c),
        hint="; ".join(hints),
        evidence={
            "check": c.current.check,
            "tier": c.tier,
            "drop": None if math.isnan(c.drop) else round(c.drop, 4),
            "limit": round(c.limit, 4),
            "limit_widened_by_noise": c.widened,
            "gates": c.gates,
            "reason": c.reason,
            "baseline": _side(c.reference),
            "current": _side(c.current),
            "size_bytes": c.current.size_bytes,
            "baseline_report": dict(source),
            "environment_differences": differences,
        },
        code=REGRESSED if status == FAIL else UNCONFIRMED,
    )


def coverage_result(
    compared: int,
    missing: list[tuple[str, str, str]],
    new: list[tuple[str, str, str]],
    differences: list[str],
    source: Mapping[str, Any],
    level: str,
) -> CheckResult:
    """How much was compared: nothing in common is INCONCLUSIVE, never a quiet PASS."""
    notes = []
    if compared == 0:
        notes.append(
            f"no higher-is-better figure in common with the baseline (its level {source.get('level')}, "
            f"this run {level}): rerun with the baseline's level and checks, or give a report of this level"
        )
    if missing:
        shown = ", ".join(f"{check} {subject} {metric}" for check, subject, metric in missing[:5])
        notes.append(f"{len(missing)} baseline figure(s) not measured now (e.g. {shown})")
    if differences:
        notes.append("the environment differs from the baseline's: " + "; ".join(differences[:6]))
    if source.get("node") and source.get("this_node") and source["node"] != source["this_node"]:
        notes.append(f"the baseline comes from node {source['node']}")
    return CheckResult(
        id="baseline.coverage",
        subject="node",
        status=INCONCLUSIVE if compared == 0 else PASS,
        metric="figures_compared",
        value=compared,
        unit="figures",
        threshold=">= 1 figure in common with the baseline",
        hint="; ".join(notes),
        evidence={
            "baseline_report": dict(source),
            "missing_now": [list(k) for k in missing],
            "new_now": [list(k) for k in new],
            "environment_differences": differences,
        },
        code=NOTHING_COMPARED,
    )


def baseline_results(
    document: Mapping[str, Any],
    current_results: Iterable[Mapping[str, Any]],
    current_environment: Mapping[str, Any],
    config: Mapping[str, Any],
    *,
    source_path: str = "",
    level: str = "",
    node: str = "",
) -> list[CheckResult]:
    """Every comparison of this run with the baseline report, plus `baseline.coverage`."""
    cfg = config
    before = figures(document.get("results", []))
    now = figures(current_results)
    comparisons = compare(before, now, cfg)
    env_before = document.get("environment") if isinstance(document.get("environment"), dict) else {}
    differences = environment_differences(env_before, current_environment)
    source = {
        "path": source_path,
        "node": document.get("node"),
        "this_node": node,
        "level": document.get("level"),
        "started": document.get("started"),
    }
    results = [comparison_result(c, differences, source) for c in comparisons]
    missing = [k for k in before if k not in now]
    new = [k for k in now if k not in before]
    results.append(coverage_result(len(comparisons), missing, new, differences, source, level))
    return results
