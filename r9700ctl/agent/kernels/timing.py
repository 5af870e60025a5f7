"""Timing discipline shared by every measurement kernel.

The rules (after stas00's all_reduce_bench.py, docs/validation.md R-G5):
- warm-up calls run apart and are never timed;
- anything that restores the inputs (refill) runs outside the timed region;
- the device is held busy by a short gate kernel while the timed calls are queued, so the
  host's enqueue overhead is not measured (nvbandwidth and p2pBandwidthLatencyTest do the same);
- a window times `calls_per_window` calls queued back to back between two device events;
- a figure is the median over windows; units are explicit (sizes base 2, GB/s base 10).

On a CPU device (the CI path) events do not exist: the host clock times the window, which is
exact there because CPU tensor operations complete before they return.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from r9700ctl.agent.kernels.figures import gbps  # noqa: F401 (gbps: the kernels' one formula)

# About 1 ms at 2 GHz: long enough to queue 20-50 copies or kernels behind it (each enqueue
# costs 5-20 us), short enough not to matter in the step's budget.
GATE_CYCLES = 2_000_000

MiB = 1 << 20
GiB = 1 << 30


def gpu_device(index: int) -> torch.device:
    """torch.device for GPU `index` (torch.cuda is HIP on ROCm and CUDA on NVIDIA)."""
    return torch.device("cuda", index)


def is_gpu(device: torch.device) -> bool:
    return device.type == "cuda"


def synchronize(device: torch.device) -> None:
    if is_gpu(device):
        torch.cuda.synchronize(device)


def hold(device: torch.device, stream: torch.cuda.Stream | None = None) -> None:
    """Queue a short busy kernel so the calls queued after it start back to back."""
    if not is_gpu(device):
        return
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:  # not every build has it; the measurement is then a little pessimistic
        return
    if stream is None:
        with torch.cuda.device(device):
            sleep(GATE_CYCLES)
    else:
        with torch.cuda.stream(stream):
            sleep(GATE_CYCLES)


def busy_default_stream(device: torch.device, cycles: int) -> None:
    """Queue `cycles` GPU clock cycles of sleep on the device's current (default) stream.

    Proofs and tests only: it plants the condition under which unordered streams race.
    """
    sleep = getattr(torch.cuda, "_sleep", None)
    if not is_gpu(device) or sleep is None or cycles <= 0:
        return
    with torch.cuda.device(device):
        sleep(int(cycles))


class WindowTimer:
    """Start/stop marks on one stream: device events on a GPU, the host clock on the CPU."""

    def __init__(self, device: torch.device, stream: torch.cuda.Stream | None = None) -> None:
        self.device = device
        self.stream = stream
        self._host_start = 0.0
        self._host_stop = 0.0
        if is_gpu(device):
            self._start = torch.cuda.Event(enable_timing=True)
            self._stop = torch.cuda.Event(enable_timing=True)

    def _stream(self) -> torch.cuda.Stream:
        return self.stream if self.stream is not None else torch.cuda.current_stream(self.device)

    def start(self) -> None:
        if is_gpu(self.device):
            self._start.record(self._stream())
        else:
            self._host_start = time.perf_counter()

    def stop(self) -> None:
        if is_gpu(self.device):
            self._stop.record(self._stream())
        else:
            self._host_stop = time.perf_counter()

    def seconds(self) -> float:
        """Elapsed seconds between the marks; waits for the stop mark on a GPU."""
        if is_gpu(self.device):
            self._stop.synchronize()
            return self._start.elapsed_time(self._stop) / 1000.0
        return self._host_stop - self._host_start


def concurrent_window(
    lanes: Sequence[tuple[torch.device, torch.cuda.Stream | None, Callable[[], Any]]],
    count: int,
    gates: int = 0,
) -> list[float]:
    """One timed window over several devices at once: each lane's (device, stream, call) timer
    starts behind `gates` gate kernels, `count` rounds of every lane's call are queued in turn,
    then every timer stops. Seconds per call of each lane, in order."""
    timers = []
    for device, stream, _ in lanes:
        for _ in range(gates):
            hold(device, stream)
        timer = WindowTimer(device, stream)
        timer.start()
        timers.append(timer)
    for _ in range(count):
        for _, _, call in lanes:
            call()
    for timer in timers:
        timer.stop()
    return [timer.seconds() / count for timer in timers]


def time_windows(
    call: Callable[[], Any],
    *,
    device: torch.device,
    windows: int,
    calls_per_window: int,
    warmup: int,
    refill: Callable[[], Any] | None = None,
    stream: torch.cuda.Stream | None = None,
) -> list[float]:
    """Seconds per call, one figure per window; `call` must queue its work on `stream`."""
    if windows < 1 or calls_per_window < 1:
        raise ValueError("windows and calls_per_window must be >= 1")
    for _ in range(warmup):
        call()
    synchronize(device)
    per_call: list[float] = []
    for _ in range(windows):
        if refill is not None:
            refill()
        synchronize(device)
        timer = WindowTimer(device, stream)
        hold(device, stream)
        timer.start()
        for _ in range(calls_per_window):
            call()
        timer.stop()
        per_call.append(timer.seconds() / calls_per_window)
    return per_call


def versions() -> dict[str, Any]:
    """Software versions to keep next to every figure."""
    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "hip": torch.version.hip}
    if torch.cuda.is_available():
        out["gpu_runtime"] = "hip" if torch.version.hip else "cuda"
    return out


def device_facts(device: torch.device) -> dict[str, Any]:
    """Name and size of the device a figure was measured on."""
    if not is_gpu(device):
        return {"device": "cpu"}
    props = torch.cuda.get_device_properties(device)
    facts: dict[str, Any] = {
        "device": f"cuda:{device.index}",
        "name": props.name,
        "total_memory_bytes": int(props.total_memory),
        "multiprocessors": int(props.multi_processor_count),
    }
    arch = getattr(props, "gcnArchName", None)
    if arch and torch.version.hip:
        facts["gfx"] = arch
    else:
        facts["compute_capability"] = f"{props.major}.{props.minor}"
    return facts
