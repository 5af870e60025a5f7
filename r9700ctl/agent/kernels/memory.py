"""Device memory bandwidth: BabelStream's copy and triad (docs/validation.md C8).

copy:  b = a            bytes = 2 x array (one read, one write)
triad: a = b + s * c    bytes = 3 x array (two reads, one write)
GB/s counts bytes read plus written, base 10, as BabelStream and STREAM do. Arrays default to
1 GiB each: far larger than any cache (64 MiB Infinity Cache on the R9700, 60 MB L2 on an
H200), so the figure is DRAM bandwidth. Calls are queued back to back in each timed window;
the figure is the median of the windows.

What is verified: not the timed calls. After each kernel's timed windows the destination is
poisoned and the kernel runs once more, untimed: copy is compared by checksum of the int32
words (exact), triad on 4096 sampled elements against a float64 computation on the host.
Everything here runs on the device's default stream, in order (no second stream to race).
"""

from __future__ import annotations

from typing import Any

import torch

from r9700ctl.agent import stats
from r9700ctl.agent.kernels import buffers, timing
from r9700ctl.agent.kernels.specs import MemorySpec

TRIAD_SCALAR = 0.4  # BabelStream's startScalar
SAMPLES = 4096  # elements compared for triad


def _triad_check(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, scalar: float) -> dict[str, Any]:
    gen = torch.Generator()
    gen.manual_seed(7)
    idx = torch.randint(0, a.numel(), (SAMPLES,), generator=gen).to(a.device)
    got = a[idx].double().cpu()
    want = b[idx].double().cpu() + scalar * c[idx].double().cpu()
    err = float(((got - want).abs() / want.abs().clamp_min(1e-30)).max())
    return {
        "ok": err < 1e-5 and bool(torch.isfinite(got).all()),
        "max_relative_error": err,
        "samples": SAMPLES,
    }


def memory_bandwidth(spec: MemorySpec) -> dict[str, Any]:
    """copy and triad GB/s on one GPU (spec.device="cpu" runs the same code on the host, for tests)."""
    device_index, array_bytes = spec.gpu, spec.array_bytes
    windows, calls_per_window, warmup = spec.windows, spec.calls_per_window, spec.warmup
    dev = timing.gpu_device(device_index) if spec.device == "cuda" else torch.device("cpu")
    count = buffers.words(array_bytes)  # float32 elements: 4 bytes each, like the int32 words
    gen = torch.Generator(device=dev)
    gen.manual_seed(11)
    a = torch.rand(count, dtype=torch.float32, device=dev, generator=gen) + 0.5
    b = torch.rand(count, dtype=torch.float32, device=dev, generator=gen) + 0.5
    c = torch.rand(count, dtype=torch.float32, device=dev, generator=gen) + 0.5
    nbytes = count * 4

    copy_s = timing.time_windows(
        lambda: b.copy_(a), device=dev, windows=windows, calls_per_window=calls_per_window, warmup=warmup
    )
    buffers.poison(b.view(torch.int32))
    b.copy_(a)
    timing.synchronize(dev)
    copy_check = {"ok": buffers.checksum(a.view(torch.int32)) == buffers.checksum(b.view(torch.int32))}

    triad_s = timing.time_windows(
        lambda: torch.add(b, c, alpha=TRIAD_SCALAR, out=a),
        device=dev,
        windows=windows,
        calls_per_window=calls_per_window,
        warmup=warmup,
    )
    a.fill_(float("nan"))  # poison: an unwritten element fails the sampled compare
    torch.add(b, c, alpha=TRIAD_SCALAR, out=a)
    timing.synchronize(dev)
    triad_check = _triad_check(a, b, c, TRIAD_SCALAR)

    copy_gbs = [timing.gbps(2 * nbytes, s) for s in copy_s]
    triad_gbs = [timing.gbps(3 * nbytes, s) for s in triad_s]
    return {
        "gpu": device_index,
        "copy_gbs": stats.median(copy_gbs),
        "triad_gbs": stats.median(triad_gbs),
        "copy_windows_gbs": copy_gbs,
        "triad_windows_gbs": triad_gbs,
        "verified": copy_check["ok"] and triad_check["ok"],
        "verify": {"copy": copy_check, "triad": triad_check},
        "array_bytes": nbytes,
        "windows": windows,
        "calls_per_window": calls_per_window,
        "warmup": warmup,
        "bytes_counted": "copy 2 x array, triad 3 x array (reads + writes)",
        "method": "torch copy_ and add(alpha=s, out=) float32, queued back to back behind a gate kernel, "
        "events, median of windows",
        "versions": timing.versions(),
        "device": timing.device_facts(dev),
    }
