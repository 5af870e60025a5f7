"""GEMM throughput on all GPUs at once, with clocks, temperatures, power and throttle sampled (C7).

One process drives every GPU: each timed window queues the same number of n x n x n matmuls on
every GPU (round robin, so they all run at the same time), then reads each GPU's events. A
matmul of 8192^3 takes 1.4 ms on an H200 and about 11 ms on an R9700, against 10-20 us to
queue it, so one thread keeps 8 GPUs busy. TFLOPS = 2 n^3 / seconds per matmul / 1e12, median
of windows. Inputs are random (never zeros: an H200 ran 13% faster on zeros, METHOD.md) and a
64 x 64 block of the output is compared with a float64 product of the same inputs afterwards.

fp32 is plain IEEE fp32 (TF32 stays off, torch's default for matmul), so its figure is the
card's vector fp32 rate, not a tensor-core rate.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from r9700ctl.agent import stats
from r9700ctl.agent.kernels import sampler, timing
from r9700ctl.agent.kernels.specs import GemmSpec, SampledLoad

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# ||out - ref|| / ||ref|| over a 64 x 64 block with K = n: the inputs are already rounded to the
# dtype, so only accumulation order and output rounding remain (METHOD.md: bf16 1e-3..1e-2).
TOLERANCE = {"bf16": 2e-2, "fp16": 1e-2, "fp32": 1e-3}
WINDOW_S = 0.5  # one timed window; about 20 windows in 10 s give a stable median
CHECK_BLOCK = 64


class _Gpu:
    def __init__(self, device: torch.device, dtype: torch.dtype, n: int, seed: int) -> None:
        self.device = device
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        self.a = torch.randn(n, n, dtype=torch.float32, device=device, generator=gen).to(dtype)
        self.b = torch.randn(n, n, dtype=torch.float32, device=device, generator=gen).to(dtype)
        self.c = torch.empty(n, n, dtype=dtype, device=device)

    def call(self) -> None:
        torch.matmul(self.a, self.b, out=self.c)

    def check(self) -> dict[str, Any]:
        self.c.fill_(float("nan"))
        self.call()
        timing.synchronize(self.device)
        k = CHECK_BLOCK
        ref = self.a[:k, :].double().cpu() @ self.b[:, :k].double().cpu()
        got = self.c[:k, :k].double().cpu()
        err = float((got - ref).norm() / ref.norm())
        return {"relative_error": err, "finite": bool(torch.isfinite(got).all())}


def _one_call_seconds(gpu: _Gpu) -> float:
    timer = timing.WindowTimer(gpu.device)
    timer.start()
    for _ in range(3):
        gpu.call()
    timer.stop()
    return max(timer.seconds() / 3, 1e-6)


def _run_dtype(
    devices: list[torch.device], name: str, n: int, seconds: float, warmup: int
) -> dict[str, dict[str, Any]]:
    gpus = [_Gpu(d, DTYPES[name], n, seed=100 + k) for k, d in enumerate(devices)]
    for gpu in gpus:
        for _ in range(warmup):
            gpu.call()
    for gpu in gpus:
        timing.synchronize(gpu.device)
    calls = max(1, round(WINDOW_S / min(_one_call_seconds(g) for g in gpus)))
    per_call: list[list[float]] = [[] for _ in gpus]
    deadline = time.monotonic() + seconds
    lanes = [(gpu.device, None, gpu.call) for gpu in gpus]
    while True:
        for k, seconds in enumerate(timing.concurrent_window(lanes, calls)):
            per_call[k].append(seconds)
        if time.monotonic() >= deadline:
            break
    flops = 2.0 * n**3
    out = {}
    for k, gpu in enumerate(gpus):
        tflops = [flops / s / 1e12 for s in per_call[k]]
        check = gpu.check()
        check["ok"] = check["finite"] and check["relative_error"] < TOLERANCE[name]
        check["tolerance"] = TOLERANCE[name]
        out[str(k)] = {
            "tflops": stats.median(tflops),
            "windows_tflops": [round(t, 3) for t in tflops],
            "calls_per_window": calls,
            "verify": check,
            "verified": check["ok"],
        }
    del gpus
    if devices[0].type == "cuda":
        torch.cuda.empty_cache()
    return out


def loaded_devices(spec: SampledLoad) -> tuple[list[torch.device], list[int], Any]:
    """The devices a sampled load runs on, their indices, and the telemetry source that samples
    them (None on the CPU: one host "GPU", no sampler)."""
    indices = list(spec.gpus)
    if spec.device != "cuda":
        return [torch.device("cpu")], indices[:1] or [0], None
    vendor = "amd" if torch.version.hip else "nvidia"
    wanted = [(i, spec.pci_addresses.get(i)) for i in indices]
    source = sampler.pick_source(vendor, wanted, spec.root, spec.hotspot_credible_c, spec.link_addresses)
    return [timing.gpu_device(i) for i in indices], indices, source


def gemm_under_load(spec: GemmSpec) -> dict[str, Any]:
    """TFLOPS per GPU and dtype, all GPUs loaded at once, plus what the sampler saw per GPU.

    Returns {"gpus": {"<index>": {"<dtype>": {...}, "telemetry": summary}}, "phases", "samples",
    "sampler", sizes, versions}. spec.device="cpu" runs one host "GPU" (tests; no sampler).
    Everything runs on each device's default stream, in order; what is verified is one more
    matmul after the timed windows into a NaN-poisoned output, a 64 x 64 block of it compared
    with a float64 product of the same inputs.
    """
    dtypes, n, seconds_per_dtype, warmup = spec.dtypes, spec.n, spec.seconds_per_dtype, spec.warmup
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise ValueError(f"unknown dtype(s) {unknown}; known: {', '.join(DTYPES)}")
    devices, device_indices, source = loaded_devices(spec)
    probe = sampler.Sampler(source, spec.sample_interval_s).start()
    t0 = time.monotonic()
    phases, per_dtype = {}, {}
    try:
        for name in dtypes:
            start = time.monotonic() - t0
            per_dtype[name] = _run_dtype(devices, name, n, seconds_per_dtype, warmup)
            phases[name] = [round(start, 3), round(time.monotonic() - t0, 3)]
    finally:
        samples = probe.stop()
    gpus: dict[str, Any] = {}
    for pos, index in enumerate(device_indices):
        entry: dict[str, Any] = {name: per_dtype[name][str(pos)] for name in dtypes}
        entry["telemetry"] = sampler.summarize(samples, index)
        gpus[str(index)] = entry
    return {
        "gpus": gpus,
        "n": n,
        "dtypes": list(dtypes),
        "seconds_per_dtype": seconds_per_dtype,
        "phases_s": phases,
        "sampler": {
            "source": source.name if source else None,
            "interval_s": spec.sample_interval_s,
            "errors": probe.errors,
            "hotspot_credible_c": spec.hotspot_credible_c,
        },
        "samples": sampler.samples_json(samples),
        "method": "torch.matmul(out=) n x n x n, random inputs, all GPUs at once, windows of about "
        f"{WINDOW_S} s timed with events, median; TFLOPS = 2 n^3 / t / 1e12",
        "versions": timing.versions(),
        "devices": {str(i): timing.device_facts(d) for i, d in zip(device_indices, devices, strict=True)},
    }
