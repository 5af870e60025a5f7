"""Independent reference: copy bandwidth through the CUDA runtime directly (CuPy), no torch.

What it measures, each as the median of windows of copies queued back to back on one
non-blocking stream between two CUDA events (`cudaMemcpyAsync`, `cudaEventElapsedTime`):
  h2d, d2h   pinned host <-> device, 256 MiB, 20 copies per window (docs/benchmarks.md: about 55 GB/s each
             way on a Gen5 x16 H200 measured this way)
  d2d        device -> device on one GPU, 1 GiB, bytes read + written counted: the ceiling a
             memory-bandwidth kernel can reach
  peer       device i -> device j (`cudaMemcpyPeerAsync`, on a stream of the source device) for
             every ordered pair when there are two or more GPUs: unidirectional, and
             bidirectional (i -> j and j -> i queued at once, each direction's GB/s), with peer
             access enabled where the runtime offers it; every destination checked afterwards
It shares no code with the agent's kernels (r9700ctl/agent/kernels), so agreement between the
two means both measure the link, not each other's mistakes.

Usage:  python3 bench/cuda_reference.py [--gpu 0] [--json out.json] [--windows 5] [--peer-only]
Prints one line per figure; --json writes every window's figure too. Not a test.
NVLink multicast stays off in this process (the lent H200 machines require it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(SAFE_ENV)

import cupy  # noqa: E402 (after the environment it must see)
from cupy.cuda import runtime  # noqa: E402

MiB = 1 << 20


def _time_copies(copy, stream: cupy.cuda.Stream, windows: int, per_window: int, warmup: int) -> list[float]:
    """Seconds per copy, one figure per window."""
    for _ in range(warmup):
        copy()
    stream.synchronize()
    out = []
    for _ in range(windows):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        for _ in range(per_window):
            copy()
        stop.record(stream)
        stop.synchronize()
        out.append(cupy.cuda.get_elapsed_time(start, stop) / 1000.0 / per_window)
    return out


def _gbs(nbytes: int, seconds: list[float]) -> tuple[float, list[float]]:
    figures = [nbytes / s / 1e9 for s in seconds]
    return statistics.median(figures), figures


def host_device(gpu: int, size: int, windows: int, per_window: int) -> dict:
    with cupy.cuda.Device(gpu):
        stream = cupy.cuda.Stream(non_blocking=True)
        host = cupy.cuda.alloc_pinned_memory(size)
        dev = cupy.cuda.alloc(size)
        runtime.memset(dev.ptr, 0x5A, size)

        def h2d() -> None:
            runtime.memcpyAsync(dev.ptr, host.ptr, size, runtime.memcpyHostToDevice, stream.ptr)

        def d2h() -> None:
            runtime.memcpyAsync(host.ptr, dev.ptr, size, runtime.memcpyDeviceToHost, stream.ptr)

        h2d_gbs, h2d_w = _gbs(size, _time_copies(h2d, stream, windows, per_window, 3))
        d2h_gbs, d2h_w = _gbs(size, _time_copies(d2h, stream, windows, per_window, 3))
    return {"h2d_gbs": h2d_gbs, "d2h_gbs": d2h_gbs, "h2d_windows_gbs": h2d_w, "d2h_windows_gbs": d2h_w}


def device_copy(gpu: int, size: int, windows: int, per_window: int) -> dict:
    with cupy.cuda.Device(gpu):
        stream = cupy.cuda.Stream(non_blocking=True)
        src, dst = cupy.cuda.alloc(size), cupy.cuda.alloc(size)
        runtime.memset(src.ptr, 0x3C, size)

        def d2d() -> None:
            runtime.memcpyAsync(dst.ptr, src.ptr, size, runtime.memcpyDeviceToDevice, stream.ptr)

        gbs, windows_gbs = _gbs(2 * size, _time_copies(d2d, stream, windows, per_window, 3))
    return {"d2d_gbs": gbs, "d2d_windows_gbs": windows_gbs, "bytes_counted": "read + write (2 x size)"}


def peer_copies(size: int, windows: int, per_window: int) -> dict:
    count = runtime.getDeviceCount()
    out = {}
    for i in range(count):
        for j in range(count):
            if i == j:
                continue
            with cupy.cuda.Device(i):
                stream = cupy.cuda.Stream(non_blocking=True)
                src = cupy.cuda.alloc(size)
            with cupy.cuda.Device(j):
                dst = cupy.cuda.alloc(size)
            can = bool(runtime.deviceCanAccessPeer(i, j))
            if can:
                # suppress: peer access may already be enabled
                with cupy.cuda.Device(i), contextlib.suppress(runtime.CUDARuntimeError):
                    runtime.deviceEnablePeerAccess(j)

            def peer(dst=dst, src=src, i=i, j=j, stream=stream) -> None:
                runtime.memcpyPeerAsync(dst.ptr, j, src.ptr, i, size, stream.ptr)

            with cupy.cuda.Device(i):
                gbs, windows_gbs = _gbs(size, _time_copies(peer, stream, windows, per_window, 2))
            out[f"{i}->{j}"] = {"gbs": gbs, "windows_gbs": windows_gbs, "can_access_peer": can}
    return out


def _enable_peer_access(i: int, j: int) -> bool:
    """Enable i -> j peer access where the runtime offers it; whether it can."""
    can = bool(runtime.deviceCanAccessPeer(i, j))
    if can:
        # suppress: peer access may already be enabled
        with cupy.cuda.Device(i), contextlib.suppress(runtime.CUDARuntimeError):
            runtime.deviceEnablePeerAccess(j)
    return can


class _PeerCopy:
    """Copies of `size` bytes from device src to device dst, queued on a stream of src."""

    def __init__(self, src: int, dst: int, size: int) -> None:
        self.src, self.dst, self.size = src, dst, size
        words = size // 4
        with cupy.cuda.Device(src):
            self.stream = cupy.cuda.Stream(non_blocking=True)
            self.source = cupy.arange(words, dtype=cupy.uint32) * 2654435761  # not zeros (METHOD.md)
        with cupy.cuda.Device(dst):
            self.target = cupy.full(words, 0xFFFFFFFF, dtype=cupy.uint32)
            self.expected = cupy.arange(words, dtype=cupy.uint32) * 2654435761
        for device in (src, dst):
            cupy.cuda.Device(device).synchronize()

    def __call__(self) -> None:
        runtime.memcpyPeerAsync(
            self.target.data.ptr, self.dst, self.source.data.ptr, self.src, self.size, self.stream.ptr
        )

    def verified(self) -> bool:
        self.stream.synchronize()
        with cupy.cuda.Device(self.dst):
            return int(cupy.count_nonzero(self.target != self.expected)) == 0


def _time_both(forward: _PeerCopy, backward: _PeerCopy, windows: int, per_window: int) -> list[list[float]]:
    """Seconds per copy of each direction while both run at once (events on each source stream)."""
    for _ in range(2):
        forward()
        backward()
    forward.stream.synchronize()
    backward.stream.synchronize()
    out: list[list[float]] = [[], []]
    for _ in range(windows):
        marks = []
        for copy in (forward, backward):
            with cupy.cuda.Device(copy.src):
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(copy.stream)
            marks.append((copy, start, stop))
        for _ in range(per_window):
            forward()
            backward()
        for copy, _, stop in marks:
            with cupy.cuda.Device(copy.src):
                stop.record(copy.stream)
        for k, (_, start, stop) in enumerate(marks):
            stop.synchronize()
            out[k].append(cupy.cuda.get_elapsed_time(start, stop) / 1000.0 / per_window)
    return out


def peer_matrix(size: int, windows: int, per_window: int, devices: list[int] | None = None) -> dict:
    """Unidirectional and bidirectional GB/s for every ordered pair, each destination verified."""
    devices = list(range(runtime.getDeviceCount())) if devices is None else devices
    out: dict = {}
    for a_pos, a in enumerate(devices):
        for b in devices[a_pos + 1 :]:
            can = {f"{a}->{b}": _enable_peer_access(a, b), f"{b}->{a}": _enable_peer_access(b, a)}
            forward, backward = _PeerCopy(a, b, size), _PeerCopy(b, a, size)
            for key, copy in ((f"{a}->{b}", forward), (f"{b}->{a}", backward)):
                with cupy.cuda.Device(copy.src):
                    uni, uni_w = _gbs(size, _time_copies(copy, copy.stream, windows, per_window, 2))
                out[key] = {
                    "unidirectional_gbs": uni,
                    "unidirectional_windows_gbs": uni_w,
                    "can_access_peer": can[key],
                    "verified_unidirectional": copy.verified(),
                }
            both = _time_both(forward, backward, windows, per_window)
            for key, copy, seconds in zip((f"{a}->{b}", f"{b}->{a}"), (forward, backward), both, strict=True):
                bidir, bidir_w = _gbs(size, seconds)
                out[key].update(
                    bidirectional_gbs=bidir,
                    bidirectional_windows_gbs=bidir_w,
                    verified_bidirectional=copy.verified(),
                )
            del forward, backward
            cupy.get_default_memory_pool().free_all_blocks()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--hostbw-mib", type=int, default=256)
    parser.add_argument("--d2d-mib", type=int, default=1024)
    parser.add_argument("--peer-mib", type=int, default=256)
    parser.add_argument("--peer-per-window", type=int, default=10)
    parser.add_argument(
        "--peer-only", action="store_true", help="only the peer matrix (no host<->device or D2D figures)"
    )
    args = parser.parse_args(argv)
    props = runtime.getDeviceProperties(args.gpu)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    if args.peer_only:
        count = runtime.getDeviceCount()
        result = {
            "tool": "bench/cuda_reference.py --peer-only (CuPy cudaMemcpyPeerAsync + CUDA events)",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "name": name,
            "gpus": count,
            "cuda_runtime": runtime.runtimeGetVersion(),
            "cuda_driver": runtime.driverGetVersion(),
            "cupy": cupy.__version__,
            "size_bytes": args.peer_mib * MiB,
            "windows": args.windows,
            "copies_per_window": args.peer_per_window,
            "safe_env": {k: os.environ.get(k) for k in SAFE_ENV},
            "peer": peer_matrix(args.peer_mib * MiB, args.windows, args.peer_per_window) if count > 1 else {},
        }
        for pair, fig in result["peer"].items():
            print(
                f"reference peer {pair}: uni {fig['unidirectional_gbs']:.2f} "
                f"bidir {fig['bidirectional_gbs']:.2f} GB/s (can access peer {fig['can_access_peer']}, "
                f"verified {fig['verified_unidirectional'] and fig['verified_bidirectional']})"
            )
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(result, fh, indent=1)
        return 0
    result = {
        "tool": "bench/cuda_reference.py (CuPy cudaMemcpyAsync + CUDA events)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "gpu": args.gpu,
        "name": name,
        "cuda_runtime": runtime.runtimeGetVersion(),
        "cuda_driver": runtime.driverGetVersion(),
        "cupy": cupy.__version__,
        "hostbw": host_device(args.gpu, args.hostbw_mib * MiB, args.windows, 20),
        "d2d": device_copy(args.gpu, args.d2d_mib * MiB, args.windows, 20),
        "hostbw_size_bytes": args.hostbw_mib * MiB,
        "d2d_size_bytes": args.d2d_mib * MiB,
        "copies_per_window": 20,
        "windows": args.windows,
        "safe_env": {k: os.environ.get(k) for k in SAFE_ENV},
    }
    if runtime.getDeviceCount() > 1:
        result["peer"] = peer_copies(args.hostbw_mib * MiB, args.windows, 10)
    print(
        f"reference {name} gpu{args.gpu}: h2d {result['hostbw']['h2d_gbs']:.2f} GB/s, "
        f"d2h {result['hostbw']['d2h_gbs']:.2f} GB/s, d2d {result['d2d']['d2d_gbs']:.1f} GB/s"
    )
    for pair, fig in result.get("peer", {}).items():
        print(f"reference peer {pair}: {fig['gbs']:.2f} GB/s (can access peer: {fig['can_access_peer']})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
