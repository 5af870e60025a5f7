"""Verdicts a node can reach on its own figures: pure functions, standard library only.

The rules, each returning a Verdict (status + the threshold text a report shows):
- `judge_floor`: a value against WARN and FAIL limits (floors from thresholds.yaml);
- `judge_measured`: a figure measured as several windows or repeats: enough of them, a spread
  that does not straddle a limit, then `judge_floor` on their median;
- `judge_against_peers`: each GPU or pair against the median of its siblings on this node;
- `judge_samples`: a sampled condition (throttle bits) that must persist before it FAILs.

Nothing unjudged is a PASS. A rule that cannot apply (no limit for this model, too few peers)
gives a Verdict with applied=False and status INCONCLUSIVE; `worse_of` takes the most severe
APPLIED verdict, and INCONCLUSIVE when none applied. Guards come first: too few samples give
INCONCLUSIVE with the numbers in the reason ("a green verdict over a run that did not measure
what it claims looks identical to a real pass", ROCm/cvs regression_lib).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from r9700ctl.agent import stats
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SEVERITY, SKIP, WARN

NO_LIMIT = "no threshold applies"


@dataclass(frozen=True)
class Verdict:
    """status: a result status; threshold: the rule as text; reason: the numbers (for the hint);
    applied: False when the rule could not be applied (no limit, too few peers): it then neither
    passes nor fails anything on its own."""

    status: str
    threshold: str
    reason: str = ""
    applied: bool = True
    # The reason code (data/codes.yaml) of a guard's verdict (too few samples, no limit); "" for
    # WARN and FAIL on the figure itself, whose code the check names (`code_for`).
    code: str = ""


# The codes of the guards every rule shares (data/codes.yaml).
NO_THRESHOLD = "NO_THRESHOLD"
REPORTED_ONLY = "REPORTED_ONLY"
NOT_MEASURED = "NOT_MEASURED"
TOO_FEW_SAMPLES = "TOO_FEW_SAMPLES"
TOO_NOISY = "TOO_NOISY"
TOO_FEW_PEERS = "TOO_FEW_PEERS"


def not_applied(threshold: str, reason: str, status: str = INCONCLUSIVE, code: str = "") -> Verdict:
    """A rule that could not apply: INCONCLUSIVE, or SKIP for a figure deliberately reported only."""
    code = code or (REPORTED_ONLY if status == SKIP else NO_THRESHOLD)
    return Verdict(status, threshold, reason, applied=False, code=code)


def coded(verdict: Verdict, bad: str) -> Verdict:
    """The verdict with `bad` as its code when it is a WARN or FAIL of the figure itself (a guard's
    own code stays): what a check does before combining rules, so the worst one names its cause."""
    if verdict.status == PASS or verdict.code:
        return verdict
    return replace(verdict, code=bad)


def code_for(verdict: Verdict, bad: str) -> str:
    """The reason code of a verdict on a figure: the guard's own when a guard decided it, else
    `bad` (the figure's code, for WARN and FAIL); "" on PASS."""
    if verdict.status == PASS:
        return ""
    return verdict.code or bad


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.1f}"


def _limits_text(warn: float | None, fail: float | None, unit: str, higher_is_better: bool) -> str:
    suffix = f" {unit}" if unit else ""
    op, bad = (">=", "below") if higher_is_better else ("<=", "above")
    parts = []
    if warn is not None:
        parts.append(f"WARN {bad} {_fmt(warn)}{suffix}")
    if fail is not None:
        parts.append(f"FAIL {bad} {_fmt(fail)}{suffix}")
    limit = warn if warn is not None else fail
    return f"{op} {_fmt(limit)}{suffix} ({', '.join(parts)})" if limit is not None else NO_LIMIT


def judge_floor(
    value: float | None,
    warn: float | None,
    fail: float | None,
    *,
    unit: str = "",
    higher_is_better: bool = True,
) -> Verdict:
    """FAIL beyond `fail`, WARN beyond `warn`, else PASS; no limit at all: not applied (INCONCLUSIVE).

    higher_is_better=True: limits are floors (bandwidth); False: ceilings (latency, temperature).
    """
    text = _limits_text(warn, fail, unit, higher_is_better)
    if warn is None and fail is None:
        return not_applied(text, "no threshold for this figure: reported only")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Verdict(INCONCLUSIVE, text, "no value was measured", code=NOT_MEASURED)
    suffix = f" {unit}" if unit else ""
    bad = "below" if higher_is_better else "above"

    def beyond(limit_value: float | None) -> bool:
        if limit_value is None:
            return False
        return value < limit_value if higher_is_better else value > limit_value

    if beyond(fail):
        return Verdict(FAIL, text, f"{_fmt(value)}{suffix} is {bad} the FAIL limit {_fmt(fail)}{suffix}")
    if beyond(warn):
        return Verdict(WARN, text, f"{_fmt(value)}{suffix} is {bad} the WARN limit {_fmt(warn)}{suffix}")
    return Verdict(PASS, text)


def judge_repeats(values: Sequence[float | None], min_repeats: int) -> Verdict | None:
    """INCONCLUSIVE when fewer than `min_repeats` usable repeats were measured, else None (go on)."""
    usable = stats.clean(values)
    if len(usable) < min_repeats:
        return Verdict(
            INCONCLUSIVE,
            f">= {min_repeats} repeats",
            f"{len(usable)} of {len(values)} repeat(s) usable, need >= {min_repeats}",
            code=TOO_FEW_SAMPLES,
        )
    return None


def judge_measured(
    windows: Sequence[float | None],
    warn: float | None,
    fail: float | None,
    *,
    min_windows: int,
    max_cv: float,
    unit: str = "",
    higher_is_better: bool = True,
) -> Verdict:
    """A figure measured as windows (or repeats), judged on their median.

    INCONCLUSIVE when fewer than `min_windows` are usable, or when their spread is wider than
    `max_cv` (sample CV) AND the slowest and fastest window would get different verdicts: the
    limit lies inside the noise, so the median says nothing. A wide spread entirely on one side
    of the limits keeps the median's verdict (half speed in every window is still half speed).
    """
    floor = judge_floor(stats.median(windows), warn, fail, unit=unit, higher_is_better=higher_is_better)
    if not floor.applied:
        return floor
    too_few = judge_repeats(windows, min_windows)
    if too_few is not None:
        return Verdict(
            INCONCLUSIVE, floor.threshold, f"{too_few.reason}: too few to judge", code=TOO_FEW_SAMPLES
        )
    spread = stats.cv(windows)
    if not math.isnan(spread) and spread > max_cv:
        data = stats.clean(windows)
        low = judge_floor(data[0], warn, fail, higher_is_better=higher_is_better)
        high = judge_floor(data[-1], warn, fail, higher_is_better=higher_is_better)
        if low.status != high.status:
            return Verdict(
                INCONCLUSIVE,
                floor.threshold,
                f"windows spread {spread:.1%} (> {max_cv:.0%}) from {_fmt(data[0])} to {_fmt(data[-1])}"
                f"{' ' + unit if unit else ''}, across the limit: too noisy to judge (another process on "
                "the GPU, power or thermal limits); rerun on an idle node",
                code=TOO_NOISY,
            )
    return floor


def judge_against_peers(
    values: Mapping[str, float],
    warn_frac: float,
    fail_frac: float,
    *,
    min_peers: int,
    higher_is_better: bool = True,
) -> dict[str, Verdict]:
    """Each subject against the median of all subjects: FAIL below fail_frac x median, WARN below warn_frac.

    With fewer than `min_peers` subjects a median says nothing about who is the odd one out: every
    subject gets a verdict with applied=False (the count is in the reason), and the floors decide.
    """
    clean = {k: float(v) for k, v in values.items() if v is not None and not math.isnan(float(v))}
    node_median = stats.median(clean.values())
    verdicts: dict[str, Verdict] = {}
    if len(clean) < min_peers or not node_median or math.isnan(node_median):
        reason = f"{len(clean)} subject(s) measured, peer comparison needs >= {min_peers}"
        for key in values:
            verdicts[key] = not_applied("vs node median: not applied", reason, code=TOO_FEW_PEERS)
        return verdicts
    if higher_is_better:
        text = f">= {warn_frac:g} x node median {_fmt(node_median)} (FAIL below {fail_frac:g} x)"
    else:
        text = f"<= {warn_frac:g} x node median {_fmt(node_median)} (FAIL above {fail_frac:g} x)"
    for key in values:
        if key not in clean:
            verdicts[key] = Verdict(INCONCLUSIVE, text, "no value was measured", code=NOT_MEASURED)
            continue
        ratio = clean[key] / node_median
        worse = (lambda frac, r=ratio: r < frac) if higher_is_better else (lambda frac, r=ratio: r > frac)
        reason = f"{ratio:.2f} x the node median {_fmt(node_median)}"
        if worse(fail_frac):
            verdicts[key] = Verdict(FAIL, text, reason)
        elif worse(warn_frac):
            verdicts[key] = Verdict(WARN, text, reason)
        else:
            verdicts[key] = Verdict(PASS, text, reason)
    return verdicts


def judge_samples(
    flags: Sequence[bool],
    *,
    max_fraction: float,
    max_consecutive: int,
    min_samples: int,
    bad_status: str = FAIL,
    isolated_status: str = WARN,
) -> Verdict:
    """A sampled condition: `bad_status` when set in more than `max_fraction` of samples or in
    `max_consecutive` samples in a row; set, but below both: `isolated_status`; never set: PASS.

    One isolated sample never FAILs (DCGM#242: "0.0 seconds" thermal violations failing runs).
    Fewer than `min_samples` samples: INCONCLUSIVE.
    """
    n = len(flags)
    hits = sum(1 for f in flags if f)
    run = stats.longest_run(flags)
    text = f"<= {max_fraction:.0%} of samples and < {max_consecutive} in a row"
    if n < min_samples:
        return Verdict(INCONCLUSIVE, text, f"{n} sample(s), need >= {min_samples}", code=TOO_FEW_SAMPLES)
    reason = f"set in {hits}/{n} samples ({hits / n:.0%}), longest run {run}"
    if hits / n > max_fraction or run >= max_consecutive:
        return Verdict(bad_status, text, reason)
    if hits:
        return Verdict(isolated_status, text, reason)
    return Verdict(PASS, text, reason)


def worse_of(*verdicts: Verdict) -> Verdict:
    """The most severe applied verdict on one subject (e.g. floor and peers).

    None applied: INCONCLUSIVE, or SKIP when a rule says the figure is deliberately reported
    only (a peer comparison without peers is neutral), with every rule's reason; never a PASS.
    """
    applied = [v for v in verdicts if v.applied]
    if applied:
        return max(applied, key=lambda v: SEVERITY[v.status])
    status = SKIP if any(v.status == SKIP for v in verdicts) else INCONCLUSIVE
    code = next((v.code for v in verdicts if v.status == status and v.code), "")
    return not_applied(
        "; ".join(v.threshold for v in verdicts),
        "; ".join(v.reason for v in verdicts if v.reason) or "no rule applied",
        status,
        code=code,
    )
