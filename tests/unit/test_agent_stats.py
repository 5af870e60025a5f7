"""Statistics and in-node verdicts: pure functions, no GPU, seeded data.

These decide PASS/WARN/FAIL for every measured figure, so their edge cases are the bugs:
one noisy sample, too few GPUs to have a median, NaN from a failed repeat, a figure nobody
judged passing anyway.
"""

from __future__ import annotations

import math
import random
import re
import statistics
from pathlib import Path

import pytest

from r9700ctl.agent import stats
from r9700ctl.agent.judge import (
    judge_against_peers,
    judge_floor,
    judge_measured,
    judge_repeats,
    judge_samples,
    worse_of,
)
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, WARN, exit_code_for, overall

PACKAGE = Path(__file__).resolve().parents[2] / "r9700ctl"


def test_median_and_percentiles_match_the_standard_librarys_inclusive_quantiles():
    rng = random.Random(3)
    data = [rng.uniform(0, 100) for _ in range(37)]
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    for q in (1, 5, 25, 50, 75, 95, 99):
        assert stats.percentile(data, q) == pytest.approx(cuts[q - 1])
    assert stats.median(data) == statistics.median(data)
    fixed = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert stats.percentile(fixed, 0) == 1.0
    assert stats.percentile(fixed, 100) == 10.0
    assert stats.percentile(fixed, 90) == pytest.approx(7.6)  # numpy.percentile(fixed, 90)
    with pytest.raises(ValueError):
        stats.percentile(fixed, 101)


def test_nan_and_none_samples_are_ignored_and_empty_is_nan():
    """A failed repeat reports NaN; it must not poison the median of the others."""
    assert stats.median([1.0, math.nan, 3.0, None]) == 2.0
    assert math.isnan(stats.median([]))
    assert math.isnan(stats.cv([]))
    assert math.isnan(stats.percentile([], 50))


def test_stdev_and_cv_are_the_sample_statistics():
    data = [50.0, 52.0, 54.0]
    assert stats.stdev(data) == pytest.approx(statistics.stdev(data))  # n - 1, not pstdev
    assert stats.cv(data) == pytest.approx(2.0 / 52.0)
    assert stats.stdev([5.0]) == 0.0


def test_robust_z_has_no_answer_without_spread():
    """Agreed in one place: no spread (MAD 0) means no distance to judge, not z = 0 or infinity."""
    assert stats.mad([1.0, 2.0, 3.0, 4.0, 100.0]) == 1.0
    assert stats.robust_z(10.0, [10.0, 10.0, 10.0]) is None
    assert stats.robust_z(99.0, [10.0, 10.0, 10.0]) is None
    assert stats.robust_z(4.0, [1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(1.0 / 1.4826)


def test_drift_and_longest_run():
    """Thermal soak shows as a slower end of a burn-in: drift 1.1 = 10% slower."""
    assert stats.drift([1.0] * 50 + [1.1] * 50) == pytest.approx(1.1)
    assert math.isnan(stats.drift([1.0]))
    assert stats.longest_run([True, False, True, True, False]) == 2


def test_summary_rounds_and_counts():
    rng = random.Random(7)
    data = [rng.gauss(55.0, 0.2) for _ in range(200)]
    summary = stats.summary(data)
    assert summary["n"] == 200
    assert 54.9 < summary["median"] < 55.1
    assert summary["p5"] < summary["p50"] < summary["p95"] < summary["p99"] <= summary["max"]
    assert stats.summary([]) == {"n": 0}


def test_there_is_one_statistics_module():
    """Bug class pinned: four copies disagreed on the percentile scale, sample vs population stdev
    and robust z without spread. Only r9700ctl/agent/stats.py may define or import them."""
    defines = re.compile(r"^def (median|percentile|_percentile|stdev|cv|mad|robust_z|longest_run)\(", re.M)
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "stats.py" and path.parent.name == "agent":
            continue
        text = path.read_text(encoding="utf-8")
        if defines.search(text) or re.search(r"^\s*(import statistics|from statistics import)", text, re.M):
            offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(55.0, PASS, id="healthy-gen5"),
        pytest.param(44.0, WARN, id="below-warn"),
        pytest.param(25.0, FAIL, id="gen4-like"),
        pytest.param(math.nan, INCONCLUSIVE, id="nothing-measured"),
        pytest.param(None, INCONCLUSIVE, id="none"),
    ],
)
def test_judge_floor_for_higher_is_better(value, expected):
    verdict = judge_floor(value, 45.0, 40.0, unit="GB/s")
    assert verdict.status == expected
    assert verdict.threshold == ">= 45 GB/s (WARN below 45 GB/s, FAIL below 40 GB/s)"


def test_judge_floor_as_a_ceiling():
    assert judge_floor(96.0, 95.0, 105.0, unit="C", higher_is_better=False).status == WARN
    assert judge_floor(106.0, 95.0, 105.0, unit="C", higher_is_better=False).status == FAIL
    assert judge_floor(80.0, 95.0, 105.0, unit="C", higher_is_better=False).status == PASS


def test_a_figure_without_any_threshold_is_never_a_pass():
    """Bug pinned: 2 GB/s host->device on an unknown link PASSed (no floor, one GPU, no peers)."""
    floor = judge_floor(2.0, None, None, unit="GB/s")
    assert floor.status == INCONCLUSIVE and not floor.applied
    peers = judge_against_peers({"gpu0": 2.0}, 0.9, 0.8, min_peers=3)
    verdict = worse_of(floor, peers["gpu0"])
    assert verdict.status == INCONCLUSIVE
    assert "reported only" in verdict.reason and "peer comparison needs >= 3" in verdict.reason


def test_peers_flag_the_one_slow_gpu_against_the_node_median():
    values = {"gpu0": 52.0, "gpu1": 53.0, "gpu2": 44.0, "gpu3": 35.0, "gpu4": 52.0, "gpu5": 54.0}
    verdicts = judge_against_peers(values, 0.9, 0.8, min_peers=3)  # median 52
    assert verdicts["gpu0"].status == PASS
    assert verdicts["gpu2"].status == WARN
    assert verdicts["gpu3"].status == FAIL
    assert "x the node median" in verdicts["gpu3"].reason


def test_with_too_few_peers_the_floor_decides():
    """A one- or two-GPU node is judged by its floors; the missing peers neither pass nor fail it."""
    verdicts = judge_against_peers({"gpu0": 52.0, "gpu1": 20.0}, 0.9, 0.8, min_peers=3)
    assert not any(v.applied for v in verdicts.values())
    assert worse_of(judge_floor(20.0, 45.0, 40.0), verdicts["gpu1"]).status == FAIL
    assert worse_of(judge_floor(52.0, 45.0, 40.0), verdicts["gpu0"]).status == PASS


def test_a_missing_peer_value_is_inconclusive_for_that_subject_only():
    verdicts = judge_against_peers({"a": 10.0, "b": 10.0, "c": 10.0, "d": math.nan}, 0.9, 0.8, min_peers=3)
    assert verdicts["d"].status == INCONCLUSIVE
    assert verdicts["a"].status == PASS


@pytest.mark.parametrize(
    ("windows", "expected", "words"),
    [
        pytest.param([55.1, 55.0, 55.2], PASS, "", id="steady-healthy"),
        pytest.param([30.0, 31.0, 29.5], FAIL, "", id="steady-half-speed"),
        pytest.param([55.0, 54.9], INCONCLUSIVE, "2 of 2 repeat(s) usable, need >= 3", id="too-few"),
        pytest.param([55.0, 30.0, 52.0, 41.0], INCONCLUSIVE, "across the limit", id="noise-across-limit"),
        pytest.param([20.0, 30.0, 25.0, 35.0], FAIL, "", id="noisy-but-all-below"),
    ],
)
def test_judge_measured_needs_enough_windows_that_do_not_straddle_a_limit(windows, expected, words):
    verdict = judge_measured(windows, 45.0, 40.0, min_windows=3, max_cv=0.05, unit="GB/s")
    assert verdict.status == expected
    assert words in verdict.reason


def test_one_isolated_throttle_sample_never_fails():
    """DCGM#242: runs failed on '0.0 seconds' of thermal violation."""
    flags = [False] * 40
    flags[17] = True
    assert judge_samples(flags, max_fraction=0.05, max_consecutive=3, min_samples=5).status == WARN
    assert (
        judge_samples(flags, max_fraction=0.05, max_consecutive=3, min_samples=5, isolated_status=PASS).status
        == PASS
    )


def test_three_consecutive_or_too_many_samples_fail():
    consecutive = [False] * 100
    consecutive[10:13] = [True, True, True]
    assert judge_samples(consecutive, max_fraction=0.05, max_consecutive=3, min_samples=5).status == FAIL
    scattered = [i % 10 == 0 for i in range(100)]  # 10% of samples, never two in a row
    assert judge_samples(scattered, max_fraction=0.05, max_consecutive=3, min_samples=5).status == FAIL
    assert judge_samples([False] * 20, max_fraction=0.05, max_consecutive=3, min_samples=5).status == PASS


def test_too_few_samples_or_repeats_are_inconclusive_with_the_numbers():
    verdict = judge_samples([True, True], max_fraction=0.05, max_consecutive=3, min_samples=5)
    assert verdict.status == INCONCLUSIVE
    assert "2 sample(s), need >= 5" in verdict.reason
    repeats = judge_repeats([51.0, math.nan, math.nan], 2)
    assert repeats is not None and repeats.status == INCONCLUSIVE
    assert "1 of 3 repeat(s) usable" in repeats.reason
    assert judge_repeats([51.0, 52.0, 50.0], 3) is None


@pytest.mark.parametrize(
    ("statuses", "status", "code"),
    [
        pytest.param([PASS, SKIP], PASS, 0, id="skip-next-to-pass"),
        pytest.param([PASS, WARN], WARN, 1, id="warnings"),
        pytest.param([PASS, INCONCLUSIVE, WARN], INCONCLUSIVE, 4, id="inconclusive-over-warn"),
        pytest.param([INCONCLUSIVE, FAIL], FAIL, 2, id="fail-wins"),
        pytest.param(["ERROR", INCONCLUSIVE], "ERROR", 3, id="error-is-could-not-run"),
        pytest.param([SKIP, SKIP], INCONCLUSIVE, 4, id="nothing-judged"),
        pytest.param([], INCONCLUSIVE, 4, id="no-checks-is-not-a-pass"),
    ],
)
def test_a_runs_status_and_exit_code(statuses, status, code):
    """INCONCLUSIVE has its own exit code (4); '0 checks, PASS' cannot happen."""
    assert overall(statuses) == status
    assert exit_code_for(statuses) == code
