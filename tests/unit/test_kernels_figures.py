"""The arithmetic behind every figure: bus bandwidth, scaling, latency statistics, link rates.

Pure functions, no torch: these pin the formulas a report's numbers depend on.
"""

from __future__ import annotations

import pytest

from r9700ctl.agent.checks.pcie import raw_link_gbs
from r9700ctl.agent.kernels import figures


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)], ids=["1", "2", "4", "8"])
def test_allreduce_bus_factor_is_2_n_minus_1_over_n(n, factor):
    """nccl-tests PERFORMANCE.md: busbw = algbw x 2(n-1)/n; a wrong factor misreports every node."""
    assert figures.bus_factor(n) == pytest.approx(factor)


def test_busbw_of_one_gib_in_ten_ms_on_four_gpus_is_161_gbs():
    """1 GiB in 10 ms is 107.4 GB/s algbw (base-10 GB), x 1.5 on 4 GPUs = 161.1 GB/s."""
    assert figures.algbw_gbs(1 << 30, 0.010) == pytest.approx(107.374, rel=1e-4)
    assert figures.busbw_gbs(1 << 30, 0.010, 4) == pytest.approx(161.061, rel=1e-4)


def test_bandwidth_of_zero_seconds_is_an_error_not_infinity():
    """A zero duration (a timer that never ran) must not become an infinite pass."""
    with pytest.raises(ValueError, match="non-positive"):
        figures.gbps(1, 0.0)


def test_world_sizes_double_up_to_the_gpu_count_and_include_it():
    """Scaling runs 1, 2, 4, ... and the node's own count when it is not a power of two."""
    assert figures.world_sizes(1) == [1]
    assert figures.world_sizes(4) == [1, 2, 4]
    assert figures.world_sizes(6) == [1, 2, 4, 6]
    assert figures.world_sizes(8) == [1, 2, 4, 8]


def test_scaling_table_gives_speedup_and_efficiency_against_one_gpu():
    """40 ms on 1 GPU, 11.76 ms on 4 = 3.4x, 85% (the magazine's claim, as a table row)."""
    rows = figures.scaling_table({1: 40.0, 2: 21.0, 4: 11.7647}, {1: 0.0, 2: 0.05, 4: 0.12})
    four = rows[-1]
    assert four["n"] == 4
    assert four["speedup"] == pytest.approx(3.4, rel=1e-4)
    assert four["efficiency"] == pytest.approx(0.85, rel=1e-4)
    assert four["comm_share"] == 0.12


def test_scaling_table_without_the_one_gpu_reference_is_refused():
    """Speedup means nothing without T(1): a missing n=1 run must not yield a table."""
    with pytest.raises(ValueError, match="one-GPU"):
        figures.scaling_table({2: 20.0, 4: 10.0})


def test_latency_stats_report_tail_ratio_and_drift():
    """90 steps of 1 ms and 10 of 4 ms at the end: p50 1 ms, p99 4 ms, drift 4x."""
    times = [0.001] * 90 + [0.004] * 10
    stats = figures.latency_stats(times)
    assert stats["p50_ms"] == pytest.approx(1.0)
    assert stats["p99_ms"] == pytest.approx(4.0)
    assert stats["tail_ratio"] == pytest.approx(4.0)
    assert stats["drift"] == pytest.approx(4.0)


def test_latency_stats_refuse_too_few_iterations():
    """Percentiles of 5 samples are noise: fewer than 10 iterations is an error, not a figure."""
    with pytest.raises(ValueError, match="need >= 10"):
        figures.latency_stats([0.001] * 5)


def test_median_of_repeats_takes_each_statistic_apart():
    """Reported figures are medians over repeats, statistic by statistic (docs/validation.md C11)."""
    runs = [figures.latency_stats([s] * 20) for s in (0.001, 0.003, 0.002)]
    assert figures.median_of_repeats(runs)["p50_ms"] == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("speed", "width", "gbs"),
    [(32.0, 16, 63.015), (16.0, 16, 31.508), (8.0, 16, 15.754), (5.0, 16, 8.0), (32.0, 8, 31.508)],
    ids=["gen5x16", "gen4x16", "gen3x16", "gen2x16", "gen5x8"],
)
def test_raw_link_rate_uses_the_encoding_of_each_generation(speed, width, gbs):
    """Floors derive from this: 128b/130b from Gen3 (8 GT/s) on, 8b/10b before."""
    assert raw_link_gbs(speed, width) == pytest.approx(gbs, rel=1e-3)


def test_raw_link_rate_of_an_unknown_link_is_none():
    """No floor can be derived from a link sysfs did not report: None, not 0."""
    assert raw_link_gbs(None, 16) is None
