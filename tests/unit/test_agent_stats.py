"""Statistics and in-node verdicts: pure functions, no GPU, seeded data.

These decide PASS/WARN/FAIL for every measured figure, so their edge cases are the bugs:
one noisy sample, too few GPUs to have a median, NaN from a failed repeat.
"""

from __future__ import annotations

import math
import random

import pytest

from r9700ctl.agent import stats
from r9700ctl.agent.judge import (
    judge_against_peers,
    judge_floor,
    judge_repeats,
    judge_samples,
    longest_run,
    worse_of,
)
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, WARN


def test_median_and_percentiles_match_numpys_linear_method():
    data = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert stats.median(data) == 3.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert stats.percentile(data, 0) == 1.0
    assert stats.percentile(data, 100) == 10.0
    assert stats.percentile(data, 90) == pytest.approx(7.6)  # numpy.percentile(data, 90)
    assert stats.percentile([5.0], 99) == 5.0


def test_nan_and_none_samples_are_ignored_and_empty_is_nan():
    """A failed repeat reports NaN; it must not poison the median of the others."""
    assert stats.median([1.0, math.nan, 3.0, None]) == 2.0
    assert math.isnan(stats.median([]))
    assert math.isnan(stats.cv([]))


def test_cv_mad_and_robust_z():
    data = [50.0, 52.0, 54.0]
    assert stats.cv(data) == pytest.approx(2.0 / 52.0)
    assert stats.mad([1.0, 2.0, 3.0, 4.0, 100.0]) == 1.0
    assert stats.robust_z(10.0, [10.0, 10.0, 10.0]) == 0.0
    assert stats.robust_z(4.0, [1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(1.0 / 1.4826)
    with pytest.raises(ValueError):
        stats.percentile(data, 101)


def test_drift_compares_the_last_tenth_with_the_first():
    """Thermal soak shows as a slower end of a burn-in: drift 1.1 = 10% slower."""
    samples = [1.0] * 50 + [1.1] * 50
    assert stats.drift(samples) == pytest.approx(1.1)
    assert math.isnan(stats.drift([1.0]))


def test_summary_rounds_and_counts():
    rng = random.Random(7)
    data = [rng.gauss(55.0, 0.2) for _ in range(200)]
    summary = stats.summary(data)
    assert summary["n"] == 200
    assert 54.9 < summary["median"] < 55.1
    assert summary["p5"] < summary["p50"] < summary["p95"] < summary["p99"] <= summary["max"]
    assert stats.summary([]) == {"n": 0}


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


def test_peers_flag_the_one_slow_gpu_against_the_node_median():
    values = {"gpu0": 52.0, "gpu1": 53.0, "gpu2": 44.0, "gpu3": 35.0, "gpu4": 52.0, "gpu5": 54.0}
    verdicts = judge_against_peers(values, 0.9, 0.8)  # median 52
    assert verdicts["gpu0"].status == PASS
    assert verdicts["gpu2"].status == WARN
    assert verdicts["gpu3"].status == FAIL
    assert "x the node median" in verdicts["gpu3"].reason


def test_with_too_few_peers_the_comparison_is_not_applied_and_cannot_dominate():
    """Bug pinned: a single-GPU node was INCONCLUSIVE (exit 3) because it has no siblings."""
    verdicts = judge_against_peers({"gpu0": 52.0, "gpu1": 20.0}, 0.9, 0.8)
    assert all(v.status == PASS and not v.applied for v in verdicts.values())
    floor = judge_floor(20.0, 45.0, 40.0)
    assert worse_of(floor, verdicts["gpu1"]).status == FAIL
    assert worse_of(judge_floor(52.0, 45.0, 40.0), verdicts["gpu0"]).status == PASS


def test_a_missing_peer_value_is_inconclusive_for_that_subject_only():
    verdicts = judge_against_peers({"a": 10.0, "b": 10.0, "c": 10.0, "d": math.nan}, 0.9, 0.8)
    assert verdicts["d"].status == INCONCLUSIVE
    assert verdicts["a"].status == PASS


def test_one_isolated_throttle_sample_never_fails():
    """DCGM#242: runs failed on '0.0 seconds' of thermal violation."""
    flags = [False] * 40
    flags[17] = True
    verdict = judge_samples(flags)
    assert verdict.status == WARN
    assert judge_samples(flags, isolated_status=PASS).status == PASS


def test_three_consecutive_or_too_many_samples_fail():
    consecutive = [False] * 100
    consecutive[10:13] = [True, True, True]
    assert judge_samples(consecutive).status == FAIL
    scattered = [i % 10 == 0 for i in range(100)]  # 10% of samples, never two in a row
    assert longest_run(scattered) == 1
    assert judge_samples(scattered).status == FAIL
    assert judge_samples([False] * 20).status == PASS


def test_too_few_samples_or_repeats_are_inconclusive_with_the_numbers():
    verdict = judge_samples([True, True])
    assert verdict.status == INCONCLUSIVE
    assert "2 sample(s), need >= 5" in verdict.reason
    repeats = judge_repeats([51.0, math.nan, math.nan], 2)
    assert repeats is not None and repeats.status == INCONCLUSIVE
    assert "1 of 3 repeat(s) usable" in repeats.reason
    assert judge_repeats([51.0, 52.0, 50.0], 3) is None
