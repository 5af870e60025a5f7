"""The single-device kernels on the CPU: timing discipline, memory copy/triad, GEMM, NUMA placement.

On a GPU node these run on the device (tests/gpu); here the same code runs on the host, so
the figures' arithmetic and the verification of results are exercised for real.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from r9700ctl.agent import stats  # noqa: E402
from r9700ctl.agent.kernels import buffers, gemm, hostbw, memory, timing  # noqa: E402
from r9700ctl.agent.kernels.specs import GemmSpec, MemorySpec  # noqa: E402


def test_time_windows_runs_warmup_apart_and_refills_before_each_window():
    """Warm-up calls are not timed, refill runs once per window, calls per window are counted."""
    calls, refills = [], []
    per_call = timing.time_windows(
        lambda: calls.append(1),
        device=torch.device("cpu"),
        windows=3,
        calls_per_window=4,
        warmup=2,
        refill=lambda: refills.append(1),
    )
    assert len(per_call) == 3
    assert len(calls) == 2 + 3 * 4
    assert len(refills) == 3
    assert all(s >= 0 for s in per_call)


def test_a_concurrent_window_queues_every_lanes_calls_in_turn_and_times_each_lane():
    """The window gemm, p2p and hostbw share: one figure per lane, `count` rounds of calls queued
    round-robin between the starts and the stops (on the host the clock times it)."""
    order: list[str] = []
    cpu = torch.device("cpu")
    lanes = [(cpu, None, lambda: order.append("a")), (cpu, None, lambda: order.append("b"))]
    per_call = timing.concurrent_window(lanes, 3, gates=2)
    assert len(per_call) == 2 and all(s >= 0 for s in per_call)
    assert order == ["a", "b"] * 3


def test_a_verified_copy_is_judged_by_the_checksum_of_its_target():
    source = buffers.random_int32(1024, torch.device("cpu"), seed=5)
    target = source.clone()
    expected = buffers.checksum(source)
    assert buffers.compared(target, expected) == {
        "ok": True,
        "expected_checksum": expected,
        "got_checksum": expected,
    }
    buffers.poison(target)
    assert buffers.compared(target, expected)["ok"] is False


def test_checksum_catches_a_single_changed_word():
    """Copies are verified by checksum: one flipped word in 1 Mi words must show."""
    data = buffers.random_int32(1 << 20, torch.device("cpu"), seed=3)
    copy = data.clone()
    assert buffers.checksum(copy) == buffers.checksum(data)
    copy[12345] += 1
    assert buffers.checksum(copy) != buffers.checksum(data)


def test_memory_kernel_counts_read_plus_write_bytes_and_verifies():
    """copy moves 2 x array, triad 3 x array; both results verified (float64 sampled for triad)."""
    out = memory.memory_bandwidth(
        MemorySpec(gpu=0, array_bytes=4 << 20, windows=2, calls_per_window=2, warmup=1, device="cpu")
    )
    assert out["verified"] is True
    assert out["array_bytes"] == 4 << 20
    assert out["copy_gbs"] > 0 and out["triad_gbs"] > 0
    assert out["copy_gbs"] == pytest.approx(stats.median(out["copy_windows_gbs"]))
    assert out["verify"]["triad"]["max_relative_error"] < 1e-5


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_gemm_kernel_verifies_its_output_against_float64(dtype):
    """Random inputs, a 64 x 64 block compared in float64 within the dtype's tolerance."""
    out = gemm.gemm_under_load(
        GemmSpec(gpus=(0,), dtypes=(dtype,), n=128, seconds_per_dtype=0.2, device="cpu")
    )
    fig = out["gpus"]["0"][dtype]
    assert fig["verified"] is True
    assert fig["verify"]["relative_error"] < gemm.TOLERANCE[dtype]
    assert fig["tflops"] > 0
    assert out["sampler"]["source"] is None
    assert out["gpus"]["0"]["telemetry"]["samples"] == 0


def test_gemm_refuses_an_unknown_dtype():
    """A typo in compute.dtypes must name the dtypes that exist."""
    with pytest.raises(ValueError, match="bf16, fp16, fp32"):
        gemm.gemm_under_load(GemmSpec(gpus=(0,), dtypes=("fp8",), device="cpu"))


def test_cpulist_ranges_are_expanded():
    """sysfs cpulist '0-3,8,10-11' (the NUMA node's CPUs host memory is placed on)."""
    assert hostbw.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert hostbw.parse_cpulist("\n") == set()


def test_host_memory_is_placed_on_the_numa_nodes_cpus_and_affinity_restored(tmp_path):
    """Pinned buffers are first touched on the GPU's NUMA node; the process's CPUs come back after."""
    allowed = sorted(os.sched_getaffinity(0))
    node = tmp_path / "sys/devices/system/node/node1"
    node.mkdir(parents=True)
    node.joinpath("cpulist").write_text(f"{allowed[0]}\n")
    before = os.sched_getaffinity(0)
    with hostbw.running_on_numa_node(tmp_path, 1) as placed:
        assert os.sched_getaffinity(0) == {allowed[0]}
    assert placed == "NUMA node 1 (1 CPUs)"
    assert os.sched_getaffinity(0) == before


@pytest.mark.parametrize(
    ("node", "says"),
    [
        (None, "reports no NUMA node"),
        (-1, "reports no NUMA node"),
        (7, "cannot read the CPUs of NUMA node 7"),
    ],
    ids=["none", "minus-one", "missing"],
)
def test_host_memory_placement_says_why_it_did_not_happen(tmp_path, node, says):
    """A VM's GPU reports NUMA node -1 (seen on the lent H200): the evidence says so instead of failing."""
    with hostbw.running_on_numa_node(tmp_path, node) as placed:
        pass
    assert placed.startswith("not placed") and says in placed


def test_the_staged_power_phase_runs_its_stages_in_order_on_the_host():
    """On the CPU there is no telemetry source: the stages still run, each for its time."""
    from r9700ctl.agent.kernels import power
    from r9700ctl.agent.kernels.specs import PowerSpec

    out = power.staged_power(PowerSpec(gpus=(0,), stage_s=0.3, idle_s=0.1, n=64, device="cpu"))

    assert [s["name"] for s in out["stages"]] == ["idle", "gpu0"]
    assert out["stages"][1]["t1"] - out["stages"][1]["t0"] >= 0.3
    assert out["sampler"]["source"] is None and out["samples"] == []
