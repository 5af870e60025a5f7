"""The measurement kernels on a real GPU (an NVIDIA H200 in this project's proof; torch.cuda is
the same API on ROCm). Small sizes: these pin that each kernel runs, verifies its data and
returns sane figures on the device; docs/benchmarks.md holds the full-size figures.
"""

from __future__ import annotations

import pytest

from r9700ctl.agent import watchdog
from r9700ctl.agent.kernels.specs import AllReduceSpec, CopySpec, GemmSpec, MemorySpec, PairSpec, StepSpec

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

# About 1 ms of sleep on the default stream at ~2 GHz (torch.cuda._sleep counts clock cycles).
ONE_MS_OF_DEFAULT_STREAM_WORK = 2_000_000


def test_host_device_copies_are_verified_and_faster_than_pageable():
    """Pinned copy-engine copies deliver the right bytes and beat pageable memory."""
    from r9700ctl.agent.kernels import hostbw

    out = hostbw.host_device_bandwidth(
        CopySpec(gpus=(0,), size_bytes=64 << 20, windows=2, copies_per_window=5)
    )
    fig = out["gpus"]["0"]
    assert fig["verified"] and fig["pageable_verified"]
    assert fig["h2d_gbs"] > fig["pageable_h2d_gbs"]
    assert fig["d2h_gbs"] > 1.0


def test_verification_survives_work_queued_on_the_default_stream_40_of_40():
    """Bug pinned (issue 10): the poison fill ran on the default stream, the verified copy on the
    lane's stream, unordered; with ~1 ms of default-stream work queued before it, every healthy
    H200 read as corrupt and the hint said to reseat the card. The streams are ordered now."""
    from r9700ctl.agent.kernels import hostbw

    spec = CopySpec(
        gpus=(0,),
        size_bytes=64 << 20,
        windows=1,
        copies_per_window=2,
        warmup=1,
        pageable=False,
        planted_default_stream_cycles=ONE_MS_OF_DEFAULT_STREAM_WORK,
    )
    verified = [hostbw.host_device_bandwidth(spec)["gpus"]["0"]["verified"] for _ in range(40)]
    assert verified.count(True) == 40


def test_memory_copy_and_triad_are_verified_on_the_device():
    """copy checksum equal, triad within 1e-5 of float64 on sampled elements."""
    from r9700ctl.agent.kernels import memory

    out = memory.memory_bandwidth(MemorySpec(gpu=0, array_bytes=256 << 20, windows=2, calls_per_window=5))
    assert out["verified"]
    assert out["copy_gbs"] > 50.0


def test_gemm_under_load_samples_telemetry_and_verifies_each_dtype():
    """bf16 and fp32 GEMMs verified; the sampler found a source and saw clocks while loaded."""
    from r9700ctl.agent.kernels import gemm

    out = gemm.gemm_under_load(GemmSpec(gpus=(0,), dtypes=("bf16", "fp32"), n=4096, seconds_per_dtype=2.0))
    entry = out["gpus"]["0"]
    assert entry["bf16"]["verified"] and entry["fp32"]["verified"]
    assert entry["bf16"]["tflops"] > entry["fp32"]["tflops"]
    assert out["sampler"]["source"] is not None
    assert entry["telemetry"]["samples"] >= 3


def test_allreduce_over_every_gpu_through_nccl_is_correct():
    """One process per GPU through the agent's launcher; the analytic-sum check counts no wrong element."""
    from r9700ctl.agent.kernels import collective

    count = torch.cuda.device_count()
    out = watchdog.run_ranks(
        "gpu.allreduce",
        count,
        collective.allreduce_sweep,
        (AllReduceSpec(sizes_bytes=(1 << 20, 64 << 20), dtype="bf16", windows=2, warmup=2),),
        timeout_s=180,
        backend="nccl",
    )
    assert out.ok, out.error
    assert out.value["wrong_total"] == 0


def test_tensor_parallel_step_runs_on_one_gpu_without_communication():
    """The LLaMA-3-70B-shaped step on one GPU: no all-reduce, so no communication share."""
    from r9700ctl.agent.kernels import scaling

    out = watchdog.run_ranks(
        "gpu.tp1",
        1,
        scaling.tp_scaling_rank,
        (StepSpec(tokens=256, iterations=5, warmup=2, repeats=1, warmup_s=0.5),),
        timeout_s=180,
        backend="nccl",
    )
    assert out.ok, out.error
    assert out.value["comm_share"] == 0.0
    assert out.value["step_ms"] > 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs >= 2 GPUs")
def test_p2p_pair_copies_are_verified_both_ways():
    """Every path of the first pair (uni, bidir, host bounce) delivers the source's checksum."""
    from r9700ctl.agent.kernels import p2p

    out = p2p.pair_bandwidth(PairSpec(a=0, b=1, size_bytes=64 << 20, windows=2, copies_per_window=3))
    assert all(d["verified"] for d in out["directions"].values())


def test_the_staged_power_phase_samples_board_power_at_10_hz_under_gemm():
    """The sampler keeps its 0.1 s schedule while the GPU computes, and sees the load in the watts."""
    from r9700ctl.agent.kernels import power
    from r9700ctl.agent.kernels.specs import PowerSpec

    out = power.staged_power(PowerSpec(gpus=(0,), stage_s=4.0, idle_s=1.0, n=4096))
    assert [s["name"] for s in out["stages"]] == ["idle", "gpu0"]
    assert out["sampler"]["source"] is not None
    assert out["sampler"]["rate_hz"]["0"] >= 10.0
    idle, stage = out["stages"]
    watts = [
        s["power_w"] for s in out["samples"] if stage["t0"] + 1 <= s["t"] <= stage["t1"] and "power_w" in s
    ]
    resting = [s["power_w"] for s in out["samples"] if s["t"] <= idle["t1"] and "power_w" in s]
    assert watts and resting and max(watts) > max(resting)
