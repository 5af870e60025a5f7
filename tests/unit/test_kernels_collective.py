"""The multi-process paths for real on the CPU: gloo ranks spawned by the agent's own launcher.

All-reduce sweep at world sizes 1, 2 and 4, a planted wrong value that the correctness check
must count, a rank that never joins becoming a TIMEOUT, the tensor-parallel scaling step and
the stability protocol. Sizes are tiny: what is tested is orchestration, timing and arithmetic.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from r9700ctl.agent import watchdog
from r9700ctl.agent.kernels import collective, figures, scaling, stability
from r9700ctl.agent.kernels.specs import AllReduceSpec, StepSpec

SIZES = (4096, 65536)


def sweep(sizes, dtype="fp32", windows=2, warmup=1, fault=None) -> tuple:
    """The args of one rank's kernel call: the AllReduceSpec the collective check builds."""
    return (
        AllReduceSpec(
            sizes_bytes=tuple(sizes), dtype=dtype, windows=windows, warmup=warmup, fault=fault or {}
        ),
    )


TINY = {"hidden": 64, "ffn": 224, "heads": 8, "kv_heads": 2, "dtype": "fp32"}


def tiny_step(**kw) -> tuple:
    """The args of one rank's step kernel: a tiny layer, 8 tokens."""
    return (StepSpec(tokens=8, layer=TINY, **kw),)


@pytest.mark.parametrize("world", [1, 2, 4], ids=["world1", "world2", "world4"])
def test_allreduce_sweep_runs_on_gloo_and_reports_busbw_from_its_own_timing(world):
    """Every rank returns the same sizes; busbw = algbw x 2(n-1)/n of the measured time; no wrong value."""
    out = watchdog.run_ranks(
        "t.allreduce", world, collective.allreduce_sweep, sweep(SIZES), timeout_s=120, backend="gloo"
    )
    assert out.ok, out.error
    assert len(out.values) == world
    rows = out.value["sizes"]
    assert [r["size_bytes"] for r in rows] == list(SIZES)
    for row in rows:
        assert row["wrong"] == 0
        assert row["checked_elements"] == row["size_bytes"] // 4 * world
        seconds = row["time_us"] / 1e6
        assert row["algbw_gbs"] == pytest.approx(figures.algbw_gbs(row["size_bytes"], seconds), rel=1e-6)
        expected_bus = row["algbw_gbs"] * figures.bus_factor(world) if world > 1 else 0.0
        assert row["busbw_gbs"] == pytest.approx(expected_bus, rel=1e-6)
    assert out.value["backend"] == "gloo"
    # Times are averaged over ranks, so every rank reports the same figures.
    assert {v["sizes"][0]["time_us"] for v in out.values} == {rows[0]["time_us"]}


def test_allreduce_in_bf16_checks_the_pattern_within_the_dtype_tolerance():
    """bf16 sums of the (r+1)(i%7+1) pattern are exact small integers: zero wrong on 4 ranks."""
    out = watchdog.run_ranks(
        "t.bf16", 4, collective.allreduce_sweep, sweep([8192], "bf16", 1, 1), timeout_s=120, backend="gloo"
    )
    assert out.ok, out.error
    assert out.value["wrong_total"] == 0


def test_a_planted_wrong_value_is_counted_on_every_rank():
    """One rank's input corrupted: the reduced element is wrong on both ranks, so #wrong is 2, not 0."""
    out = watchdog.run_ranks(
        "t.corrupt",
        2,
        collective.allreduce_sweep,
        sweep([4096], "fp32", 1, 1, {"corrupt_rank": 1}),
        timeout_s=120,
        backend="gloo",
    )
    assert out.ok, out.error
    assert out.value["wrong_total"] == 2
    assert out.value["sizes"][0]["wrong"] == 2


def test_a_rank_that_never_joins_becomes_a_timeout_not_a_hang():
    """A stalled collective (the R9700 P2P hang's symptom) must end as TIMEOUT at the deadline."""
    out = watchdog.run_ranks(
        "t.stall",
        2,
        collective.allreduce_sweep,
        sweep([4096], "fp32", 1, 1, {"stall_rank": 1, "stall_s": 600}),
        timeout_s=15,
        backend="gloo",
    )
    assert out.status == watchdog.TIMEOUT
    assert out.duration_s < 60


def test_unknown_dtype_is_refused_with_the_known_ones():
    """A typo in a level's dtype must say what is allowed."""
    out = watchdog.run_ranks(
        "t.dtype", 1, collective.allreduce_sweep, sweep([4096], "fp8"), timeout_s=60, backend="gloo"
    )
    assert out.status == watchdog.ERROR
    assert "bf16, fp16, fp32" in out.error


def test_tensor_parallel_step_scales_from_one_to_two_ranks_with_comm_timed():
    """n=1 has no all-reduce (comm share 0); n=2 times its all-reduces inside the step."""
    one = watchdog.run_ranks(
        "t.s1",
        1,
        scaling.tp_scaling_rank,
        tiny_step(iterations=5, warmup=1, warmup_s=0.0),
        timeout_s=120,
        backend="gloo",
    )
    two = watchdog.run_ranks(
        "t.s2",
        2,
        scaling.tp_scaling_rank,
        tiny_step(iterations=5, warmup=1, warmup_s=0.0),
        timeout_s=120,
        backend="gloo",
    )
    assert one.ok, one.error
    assert two.ok, two.error
    assert one.value["comm_share"] == 0.0
    assert 0.0 < two.value["comm_share"] <= 1.0
    assert two.value["shape"]["per_rank"] == {"q": 32, "kv": 16, "ffn": 112}
    rows = figures.scaling_table({1: one.value["step_ms"], 2: two.value["step_ms"]})
    assert rows[1]["speedup"] == pytest.approx(one.value["step_ms"] / two.value["step_ms"])


def test_stability_reports_medians_of_each_repeat():
    """3 repeats of 20 iterations: the median block and every repeat are returned."""
    out = watchdog.run_ranks(
        "t.stab",
        2,
        stability.latency_rank,
        tiny_step(iterations=20, repeats=3, warmup=1, warmup_s=0.0),
        timeout_s=120,
        backend="gloo",
    )
    assert out.ok, out.error
    assert len(out.value["repeats"]) == 3
    med = out.value["median"]
    assert med["iterations"] == 20
    assert med["p50_ms"] <= med["p95_ms"] <= med["p99_ms"]
    assert med["tail_ratio"] == pytest.approx(sorted(r["tail_ratio"] for r in out.value["repeats"])[1])


def test_stability_of_an_allreduce_needs_two_ranks():
    """The all-reduce workload on one rank measures nothing: refused with the reason."""
    out = watchdog.run_ranks(
        "t.ar1",
        1,
        stability.latency_rank,
        tiny_step(workload="allreduce", iterations=20),
        timeout_s=60,
        backend="gloo",
    )
    assert out.status == watchdog.ERROR
    assert "needs >= 2 ranks" in out.error
