"""GPU <-> GPU copy bandwidth for one pair, against a copy bounced through host memory (C5).

For the pair (a, b) one call measures, each as the median of windows of copies queued back to
back (copy engine, `copy_` between devices):
- unidirectional a->b and b->a;
- bidirectional: both directions at once on their own streams, each direction's GB/s
  ("per direction under bidirectional load") and their sum ("aggregate");
- host bounce a->host->b and b->host->a of the same size: the copy chunked through pinned host
  memory, D2H of chunk k overlapping H2D of chunk k-1. That is what a runtime without working
  peer-to-peer does at best, so P2P at or below 1.1x of it means P2P is not effective
  (ACS redirecting peer traffic through the root complex, IOMMU in translated mode, small BAR).
- torch.cuda.can_device_access_peer both ways.
What is verified: not the timed copies. After each path's timed windows (unidirectional,
bidirectional, host bounce) one more copy runs untimed on the same streams into a destination
poisoned on the default stream, and its checksum is compared with the source's.

torch performs a cross-device copy on the source device's current stream and makes it wait
for the destination device's current stream; each direction therefore gets its own stream on
both devices, or the two directions of the bidirectional test would serialise. Random fills and
poison run on the default streams; the direction's streams wait for them (`wait_stream`) before
the next copy, so no fill can land after the copy it should precede.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from r9700ctl.agent import stats
from r9700ctl.agent.kernels import buffers, timing
from r9700ctl.agent.kernels.specs import PairSpec

BOUNCE_CHUNKS = 8  # enough to overlap the two legs; each chunk still >= 16 MiB at 128 MiB


class _Direction:
    """Buffers and streams for copies from device `src` to device `dst`."""

    def __init__(self, src: int, dst: int, count: int, seed: int) -> None:
        self.src, self.dst = timing.gpu_device(src), timing.gpu_device(dst)
        self.src_stream = torch.cuda.Stream(self.src)
        self.dst_stream = torch.cuda.Stream(self.dst)
        self.source = buffers.random_int32(count, self.src, seed=seed)
        self.target = torch.empty(count, dtype=torch.int32, device=self.dst)
        self.nbytes = count * 4
        self.expected = buffers.checksum(self.source)
        self.order_after_default_streams()

    def order_after_default_streams(self) -> None:
        """What the default streams hold (random source, poison) happens before the next copy."""
        self.src_stream.wait_stream(torch.cuda.current_stream(self.src))
        self.dst_stream.wait_stream(torch.cuda.current_stream(self.dst))

    @contextlib.contextmanager
    def streams(self):
        with torch.cuda.stream(self.src_stream), torch.cuda.stream(self.dst_stream):
            yield

    def copy(self) -> None:
        with self.streams():
            self.target.copy_(self.source, non_blocking=True)

    def verify(self, copy: Callable[[], None] | None = None) -> dict[str, Any]:
        """One untimed copy (this direction's, or `copy`: the host bounce) into a poisoned target."""
        buffers.poison(self.target)
        self.order_after_default_streams()
        (copy or self.copy)()
        torch.cuda.synchronize(self.src)
        torch.cuda.synchronize(self.dst)
        return buffers.compared(self.target, self.expected)


class _Bounce:
    """src -> pinned host -> dst in chunks; the H2D of a chunk waits only for its own D2H."""

    def __init__(self, direction: _Direction, chunks: int) -> None:
        self.d = direction
        count = direction.source.numel()
        self.host = torch.empty(count, dtype=torch.int32, pin_memory=True)
        step = -(-count // chunks)
        self.bounds = [(lo, min(lo + step, count)) for lo in range(0, count, step)]

    def copy(self) -> None:
        d = self.d
        for lo, hi in self.bounds:
            with torch.cuda.stream(d.src_stream):
                self.host[lo:hi].copy_(d.source[lo:hi], non_blocking=True)
                landed = torch.cuda.Event()
                landed.record(d.src_stream)
            d.dst_stream.wait_event(landed)
            with torch.cuda.stream(d.dst_stream):
                d.target[lo:hi].copy_(self.host[lo:hi], non_blocking=True)
        # The next call's D2H must not overwrite host chunks the H2D has not read yet.
        done = torch.cuda.Event()
        done.record(d.dst_stream)
        d.src_stream.wait_event(done)

    def timed(self, windows: int, copies: int, warmup: int) -> list[float]:
        """Seconds per bounced copy: from a start mark on src to the end mark on dst."""
        d = self.d
        for _ in range(warmup):
            self.copy()
        out = []
        for _ in range(windows):
            torch.cuda.synchronize(d.src)
            torch.cuda.synchronize(d.dst)
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            timing.hold(d.src, d.src_stream)
            start.record(d.src_stream)
            for _ in range(copies):
                self.copy()
            # Events of two devices cannot be compared: bring the finish back to src's stream.
            finished = torch.cuda.Event()
            finished.record(d.dst_stream)
            d.src_stream.wait_event(finished)
            stop.record(d.src_stream)
            stop.synchronize()
            out.append(start.elapsed_time(stop) / 1000.0 / copies)
        return out

    def verify(self) -> dict[str, Any]:
        return self.d.verify(self.copy)


def _timed(directions: list[_Direction], windows: int, copies: int, warmup: int) -> list[list[float]]:
    """Seconds per copy for each direction, all directions queued together in each window."""
    for d in directions:
        for _ in range(warmup):
            d.copy()
    out: list[list[float]] = [[] for _ in directions]
    for _ in range(windows):
        for d in directions:
            torch.cuda.synchronize(d.src)
            torch.cuda.synchronize(d.dst)
        lanes = [(d.src, d.src_stream, d.copy) for d in directions]
        for k, seconds in enumerate(timing.concurrent_window(lanes, copies, gates=1)):
            out[k].append(seconds)
    return out


def _gbs(nbytes: int, seconds: list[float]) -> tuple[float, list[float]]:
    figures = [timing.gbps(nbytes, s) for s in seconds]
    return stats.median(figures), figures


def pair_bandwidth(spec: PairSpec) -> dict[str, Any]:
    """P2P figures for the unordered pair {spec.a, spec.b}, both ordered directions.

    Returns {"can_access_peer": {"a->b": bool, "b->a": bool}, "directions": {"a->b": {...}, ...},
    sizes, iterations, versions}; each direction holds unidirectional, bidirectional and
    host-bounce GB/s (medians and windows) and the verification of every copy path.
    """
    a, b, size_bytes = spec.a, spec.b, spec.size_bytes
    windows, copies_per_window, warmup = spec.windows, spec.copies_per_window, spec.warmup
    bidirectional, host_bounce = spec.bidirectional, spec.host_bounce
    if a == b:
        raise ValueError("a pair needs two different GPUs")
    count = buffers.words(size_bytes)
    keys = (f"{a}->{b}", f"{b}->{a}")
    can = {
        keys[0]: bool(torch.cuda.can_device_access_peer(a, b)),
        keys[1]: bool(torch.cuda.can_device_access_peer(b, a)),
    }
    forward = _Direction(a, b, count, seed=4000 + 17 * a + b)
    backward = _Direction(b, a, count, seed=4000 + 17 * b + a)
    pair = (forward, backward)
    result: dict[str, dict[str, Any]] = {k: {} for k in keys}

    for key, d in zip(keys, pair, strict=True):
        (seconds,) = _timed([d], windows, copies_per_window, warmup)
        result[key]["unidirectional_gbs"], result[key]["unidirectional_windows_gbs"] = _gbs(d.nbytes, seconds)
        result[key]["verify_unidirectional"] = d.verify()

    if bidirectional:
        both = _timed(list(pair), windows, copies_per_window, warmup)
        for key, d, seconds in zip(keys, pair, both, strict=True):
            result[key]["bidirectional_gbs"], result[key]["bidirectional_windows_gbs"] = _gbs(
                d.nbytes, seconds
            )
        for key, d in zip(keys, pair, strict=True):
            result[key]["verify_bidirectional"] = d.verify()

    if host_bounce:
        for key, d in zip(keys, pair, strict=True):
            bounce = _Bounce(d, BOUNCE_CHUNKS)
            seconds = bounce.timed(windows, max(1, copies_per_window // 2), 1)
            result[key]["host_bounce_gbs"], result[key]["host_bounce_windows_gbs"] = _gbs(d.nbytes, seconds)
            result[key]["verify_host_bounce"] = bounce.verify()
            del bounce

    for key in keys:
        checks = [v for k, v in result[key].items() if k.startswith("verify_")]
        result[key]["verified"] = all(c["ok"] for c in checks)
    out: dict[str, Any] = {
        "pair": [a, b],
        "can_access_peer": can,
        "directions": result,
        "size_bytes": count * 4,
        "windows": windows,
        "copies_per_window": copies_per_window,
        "warmup": warmup,
        "bounce_chunks": BOUNCE_CHUNKS,
        "method": "torch copy_ between devices (copy engine), one stream per direction on both devices, "
        "queued back to back behind a gate kernel, events on the source stream, median of windows",
        "versions": timing.versions(),
    }
    if bidirectional:
        out["bidirectional_aggregate_gbs"] = sum(result[k]["bidirectional_gbs"] for k in keys)
    del forward, backward, pair
    torch.cuda.empty_cache()
    return out
