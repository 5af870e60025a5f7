"""Host <-> device copy bandwidth through the copy engines (docs/validation.md C4).

What is measured: `non_blocking` copies between pinned host memory and device memory, H2D and
D2H, 20 copies of 256 MiB queued back to back in each timed window, median of the windows.
Queued copies are what a health check should read: timing each copy alone adds the launch and
completion gaps and reads 47-53 GB/s on a Gen5 x16 link where queued copies give 55 (docs/benchmarks.md).

Pinned host memory is allocated while this process runs on the CPUs of the GPU's NUMA node,
so first touch puts the pages there (TransferBench picks the closest NUMA node the same way).
With several GPUs the copies of all of them run at once (one stream per GPU): that shows a
shared root port or a host memory bottleneck that one-at-a-time figures hide.

Pageable host memory is measured too, as evidence only (a few GB/s is normal, docs/benchmarks.md).

What is verified: NOT the timed copies. After each direction's timed windows, one more copy of
the same size runs on the same lane stream, untimed: its source is freshly randomised, its
destination poisoned first, and the destination's checksum is compared with the source's. That
proves the path (link, DMA engine, memory) delivers the right bytes; the timed copies move the
same buffers the same way.

Streams: the lane's copies run on the lane's own stream, while allocation, random fills and
poisoning run on the device's default (current) stream. Every phase therefore first makes the
lane stream wait for the default stream (`Stream.wait_stream`): without that, a poison fill
still queued behind other default-stream work lands after the verified copy and a healthy card
reads as corrupt (issue 10; tests/gpu queues about 1 ms of default-stream work before every
phase and must pass 40 of 40).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from r9700ctl.agent import stats
from r9700ctl.agent.kernels import buffers, timing
from r9700ctl.agent.kernels.specs import CopySpec


def parse_cpulist(text: str) -> set[int]:
    """CPUs of a sysfs cpulist such as "0-7,16-23" (empty text: no CPUs)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.update(range(int(low), int(high) + 1))
        else:
            cpus.add(int(part))
    return cpus


def numa_cpus(root: str | Path, node: int) -> set[int]:
    path = Path(root) / f"sys/devices/system/node/node{node}/cpulist"
    return parse_cpulist(path.read_text())


@contextlib.contextmanager
def running_on_numa_node(root: str | Path, node: int | None) -> Iterator[str]:
    """Run the body on the CPUs of `node`, so memory it first touches lands there.

    Yields a sentence saying where host memory was placed, for the evidence.
    """
    if node is None or node < 0:
        yield "not placed: the GPU reports no NUMA node"
        return
    if not hasattr(os, "sched_setaffinity"):
        yield "not placed: this platform cannot set CPU affinity"
        return
    try:
        wanted = numa_cpus(root, node) & os.sched_getaffinity(0)
    except (OSError, ValueError) as err:
        yield f"not placed: cannot read the CPUs of NUMA node {node} ({err})"
        return
    if not wanted:
        yield f"not placed: this process may not run on NUMA node {node}'s CPUs"
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, wanted)
    try:
        yield f"NUMA node {node} ({len(wanted)} CPUs)"
    finally:
        os.sched_setaffinity(0, before)


class _Lane:
    """One GPU's buffers and stream for one direction of copies."""

    def __init__(
        self,
        index: int,
        nbytes: int,
        pinned: bool,
        root: str | Path,
        numa_node: int | None,
        planted_cycles: int = 0,
    ) -> None:
        self.index = index
        self.planted_cycles = planted_cycles
        self.device = timing.gpu_device(index)
        self.stream = torch.cuda.Stream(self.device)
        count = buffers.words(nbytes)
        self.nbytes = count * 4
        with running_on_numa_node(root, numa_node if pinned else None) as placed:
            self.host = torch.empty(count, dtype=torch.int32, pin_memory=pinned)
            self.host.fill_(0)  # first touch, still on the node's CPUs
        self.placement = placed if pinned else "pageable (not placed)"
        self.dev = buffers.random_int32(count, self.device, seed=1000 + index)

    def fill_host_random(self) -> int:
        """Random host contents (copied from a random device buffer); returns their checksum."""
        source = buffers.random_int32(self.host.numel(), self.device, seed=2000 + self.index)
        self.host.copy_(source)
        return buffers.checksum(self.host)

    def planted_default_work(self) -> None:
        """Proof and tests only: queue busy work on the default stream (see CopySpec)."""
        if self.planted_cycles:
            timing.busy_default_stream(self.device, self.planted_cycles)

    def order_after_default_stream(self) -> None:
        """Everything queued so far on the default stream (fills, poison) happens before the
        lane's next copy."""
        self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def h2d(self) -> None:
        with torch.cuda.stream(self.stream):
            self.dev.copy_(self.host, non_blocking=True)

    def d2h(self) -> None:
        with torch.cuda.stream(self.stream):
            self.host.copy_(self.dev, non_blocking=True)


def _timed_concurrent(lanes: list[_Lane], direction: str, windows: int, copies: int, warmup: int) -> dict:
    """Seconds per copy for every lane, all lanes' copies queued at once in each window."""
    for lane in lanes:
        lane.planted_default_work()
        lane.order_after_default_stream()
        for _ in range(warmup):
            getattr(lane, direction)()
    for lane in lanes:
        torch.cuda.synchronize(lane.device)
    per_copy: dict[int, list[float]] = {lane.index: [] for lane in lanes}
    timed = [(lane.device, lane.stream, getattr(lane, direction)) for lane in lanes]
    for _ in range(windows):
        for lane in lanes:
            torch.cuda.synchronize(lane.device)
        # Longer gate with more GPUs: every GPU's copies must be queued before any starts.
        seconds = timing.concurrent_window(timed, copies, gates=len(lanes))
        for lane, each in zip(lanes, seconds, strict=True):
            per_copy[lane.index].append(each)
    return per_copy


def _verified_copy(lane: _Lane, direction: str, expected: int) -> dict[str, Any]:
    """The lane's copy in `direction`, run on its stream after the default stream's fills and
    poison, compared by checksum with its source's (`expected`)."""
    lane.order_after_default_stream()
    getattr(lane, direction)()
    torch.cuda.synchronize(lane.device)
    return buffers.compared(lane.dev if direction == "h2d" else lane.host, expected)


def _verify_h2d(lanes: list[_Lane]) -> dict[int, dict[str, Any]]:
    """One untimed H2D copy per lane into a poisoned device buffer, compared by checksum."""
    out = {}
    for lane in lanes:
        expected = lane.fill_host_random()
        lane.planted_default_work()
        buffers.poison(lane.dev)  # on the default stream
        out[lane.index] = _verified_copy(lane, "h2d", expected)
    return out


def _verify_d2h(lanes: list[_Lane]) -> dict[int, dict[str, Any]]:
    """One untimed D2H copy per lane from a fresh random device buffer into poisoned host memory."""
    out = {}
    for lane in lanes:
        lane.planted_default_work()
        lane.dev.copy_(buffers.random_int32(lane.dev.numel(), lane.device, seed=3000 + lane.index))
        expected = buffers.checksum(lane.dev)
        lane.planted_default_work()
        buffers.poison(lane.host)  # host memory: written by the CPU before the copy is queued
        out[lane.index] = _verified_copy(lane, "d2h", expected)
    return out


def _measure(
    spec: CopySpec, pinned: bool, windows: int, copies: int, warmup: int
) -> dict[int, dict[str, Any]]:
    nodes = {int(k): v for k, v in spec.numa_nodes.items()}
    lanes = [
        _Lane(i, spec.size_bytes, pinned, spec.root, nodes.get(i), spec.planted_default_stream_cycles)
        for i in spec.gpus
    ]
    for lane in lanes:
        lane.fill_host_random()
    h2d = _timed_concurrent(lanes, "h2d", windows, copies, warmup)
    h2d_check = _verify_h2d(lanes)
    d2h = _timed_concurrent(lanes, "d2h", windows, copies, warmup)
    d2h_check = _verify_d2h(lanes)
    result = {}
    for lane in lanes:
        h2d_gbs = [timing.gbps(lane.nbytes, s) for s in h2d[lane.index]]
        d2h_gbs = [timing.gbps(lane.nbytes, s) for s in d2h[lane.index]]
        result[lane.index] = {
            "h2d_gbs": stats.median(h2d_gbs),
            "d2h_gbs": stats.median(d2h_gbs),
            "h2d_windows_gbs": h2d_gbs,
            "d2h_windows_gbs": d2h_gbs,
            "verified": h2d_check[lane.index]["ok"] and d2h_check[lane.index]["ok"],
            "verify": {"h2d": h2d_check[lane.index], "d2h": d2h_check[lane.index]},
            "host_memory": lane.placement,
        }
    del lanes
    torch.cuda.empty_cache()
    return result


def host_device_bandwidth(spec: CopySpec) -> dict[str, Any]:
    """H2D and D2H GB/s per GPU of `spec.gpus`; with several GPUs they copy at the same time.

    Returns a JSON-serialisable dict: {"gpus": {"<index>": {...}}, "concurrent", sizes,
    iterations, versions}; the per-GPU dict holds medians, every window's figure, the
    verification of the extra untimed copy per direction (see the module docstring) and where
    the host memory was placed.
    """
    if not spec.gpus:
        raise ValueError("no GPU to measure")
    pinned = _measure(spec, True, spec.windows, spec.copies_per_window, spec.warmup)
    gpus: dict[str, Any] = {str(i): pinned[i] for i in spec.gpus}
    if spec.pageable:
        # Evidence only: fewer, shorter windows (pageable copies are ten times slower).
        slow = _measure(spec, False, 2, 3, 1)
        for i in spec.gpus:
            gpus[str(i)]["pageable_h2d_gbs"] = slow[i]["h2d_gbs"]
            gpus[str(i)]["pageable_d2h_gbs"] = slow[i]["d2h_gbs"]
            gpus[str(i)]["pageable_verified"] = slow[i]["verified"]
    return {
        "gpus": gpus,
        "concurrent": len(spec.gpus) > 1,
        "size_bytes": buffers.words(spec.size_bytes) * 4,
        "windows": spec.windows,
        "copies_per_window": spec.copies_per_window,
        "warmup": spec.warmup,
        "verified_copy": "one extra untimed copy per direction, fresh random source, poisoned "
        "destination, checksums compared",
        "planted_default_stream_cycles": spec.planted_default_stream_cycles,
        "method": "torch copy_(non_blocking=True) pinned<->device, one stream per GPU ordered after the "
        "default stream, copies queued back to back behind a gate kernel, CUDA/HIP events, median of windows",
        "versions": timing.versions(),
        "devices": {str(i): timing.device_facts(timing.gpu_device(i)) for i in spec.gpus},
    }
