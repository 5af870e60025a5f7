"""The staged power phase: GEMM load on each GPU alone, then on all GPUs at once, sampled at 10 Hz.

What a PSU carries is the sum of its cards' draw at the same moment, and its worst moments are
short: a 1 s average hides them. So the draw of every GPU is sampled every 0.1 s (the sampler
keeps a fixed schedule; its achieved rate is reported) through one sampler for all GPUs, so the
readings of one tick line up across cards. On NVIDIA the reading is NVML's instantaneous power
(NVML_FI_DEV_POWER_INSTANT; nvmlDeviceGetPowerUsage is a 1 s average on newer GPUs), on AMD
hwmon power1_input (instantaneous) beside power1_average.

Stages (in order, times relative to the sampler's start):
  idle   spec.idle_s with no load (the fans' and temperatures' starting point);
  gpuN   spec.stage_s of bf16 n x n x n matmuls on GPU N alone, for each GPU;
  all    spec.all_s of the same on every GPU at once (skipped with one GPU: its own stage is it).
The load is the GEMM of kernels.gemm (random inputs; each GPU queues about 0.1 s of matmuls,
then synchronizes, so a stage ends on time). Nothing is timed or verified here: kernels.gemm
measures throughput; this measures watts.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from r9700ctl.agent.kernels import gemm, sampler, timing
from r9700ctl.agent.kernels.specs import PowerSpec

BATCH_S = 0.1  # queued work per GPU between synchronizations: a stage ends within ~0.1 s of its time


def _load(gpus: list[gemm._Gpu], seconds: float, calls: int) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(calls):
            for gpu in gpus:
                gpu.call()
        for gpu in gpus:
            timing.synchronize(gpu.device)


def staged_power(spec: PowerSpec) -> dict[str, Any]:
    """Samples of every GPU through the idle, per-GPU and all-GPU stages, and when each stage ran.

    Returns {"stages": [{"name", "gpus", "t0", "t1"}], "samples": [...], "sampler": {"source",
    "interval_s", "errors", "rate_hz": {gpu: achieved}}, "limits": {gpu: {sensor: crit C}},
    "n", "dtype", "method", "versions", "devices"}. spec.device="cpu" runs one host "GPU" (tests).
    """
    if spec.dtype not in gemm.DTYPES:
        raise ValueError(f"unknown dtype {spec.dtype}; known: {', '.join(gemm.DTYPES)}")
    devices, indices, source = gemm.loaded_devices(spec)
    loads = [gemm._Gpu(d, gemm.DTYPES[spec.dtype], spec.n, seed=200 + k) for k, d in enumerate(devices)]
    for load in loads:  # warm the kernels up before the sampler starts (cuBLAS/hipBLASLt selection)
        load.call()
        timing.synchronize(load.device)
    calls = max(1, round(BATCH_S / min(gemm._one_call_seconds(g) for g in loads)))
    limits = source.limits() if source is not None and hasattr(source, "limits") else {}
    probe = sampler.Sampler(source, spec.sample_interval_s).start()
    t0 = time.monotonic()
    stages: list[dict[str, Any]] = []

    def stage(name: str, members: list[int], seconds: float) -> None:
        start = time.monotonic() - t0
        if members:
            _load([loads[indices.index(i)] for i in members], seconds, calls)
        else:
            time.sleep(seconds)
        stages.append(
            {"name": name, "gpus": members, "t0": round(start, 3), "t1": round(time.monotonic() - t0, 3)}
        )

    try:
        stage("idle", [], spec.idle_s)
        for index in indices:
            stage(f"gpu{index}", [index], spec.stage_s)
        if len(indices) > 1:
            stage("all", indices, spec.all_s)
    finally:
        samples = probe.stop()
    loads.clear()  # free the GPU memory before the next check
    if spec.device == "cuda":
        torch.cuda.empty_cache()
    return {
        "stages": stages,
        "samples": sampler.samples_json(samples),
        "sampler": {
            "source": source.name if source else None,
            "interval_s": spec.sample_interval_s,
            "errors": probe.errors,
            "rate_hz": {str(i): sampler.sample_rate_hz(samples, i) for i in indices},
        },
        "limits": {str(i): v for i, v in limits.items()},
        "n": spec.n,
        "dtype": spec.dtype,
        "calls_per_batch": calls,
        "method": f"torch.matmul {spec.dtype} {spec.n}^3 on each GPU alone for {spec.stage_s:g} s, then on "
        f"all for {spec.all_s:g} s; board power sampled every {spec.sample_interval_s:g} s",
        "versions": timing.versions(),
        "devices": {str(i): timing.device_facts(d) for i, d in zip(indices, devices, strict=True)},
    }
