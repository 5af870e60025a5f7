"""Independent reference: all-reduce bus bandwidth through NCCL directly (cupy.cuda.nccl), no torch.

One process per GPU (multiprocessing "spawn"), each with its own communicator
(`ncclCommInitRank` on a unique id made by this parent process), like torchrun or the agent.
Per message size, each rank:
  - checks one out-of-place all-reduce of bf16 1.0 on every rank: every element must be n;
  - runs warm-up calls, then windows of `calls` all-reduces queued back to back on one
    non-blocking stream between two CUDA events, after a barrier (a one-element all-reduce
    waited for); seconds per call = elapsed / calls.
The parent averages each window over ranks (nccl-tests' default), takes the median window, and
reports algbw = S / t and busbw = algbw x 2(n-1)/n (nccl-tests doc/PERFORMANCE.md,
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). Sizes base 2, GB/s base 10.
With one GPU the communicator still initialises and the call runs: busbw is 0 by definition.

It shares no code with the agent (r9700ctl/agent/kernels/collective.py). NCCL_* variables of
this process (NCCL_P2P_DISABLE=1 for the P2P-off run) reach every rank; NVLink multicast stays
off, as the lent H200 machines require.

Usage:  python3 bench/nccl_reference.py [--sizes-mib 64,128,256,512,1024] [--json out.json]
Prints one line per size. Not a test.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import struct
import sys
import time
from typing import Any

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(SAFE_ENV)

MiB = 1 << 20
BF16_ONE = 0x3F80  # 1.0 in bfloat16
NCCL_BFLOAT16 = 9  # ncclBfloat16 (NCCL >= 2.10), if this CuPy does not name it


def bf16_bits(value: float) -> int:
    """The bfloat16 bit pattern of a small integer (exact: the top 16 bits of its float32)."""
    return struct.unpack(">I", struct.pack(">f", float(value)))[0] >> 16


def _rank_main(
    rank: int, world: int, uid: tuple, sizes: list[int], windows: int, warmup: int, calls: int, conn: Any
) -> None:
    try:
        import cupy
        from cupy.cuda import nccl

        cupy.cuda.Device(rank).use()
        comm = nccl.NcclCommunicator(world, uid, rank)
        stream = cupy.cuda.Stream(non_blocking=True)
        dtype = getattr(nccl, "NCCL_BFLOAT16", NCCL_BFLOAT16)
        token = cupy.ones(1, dtype=cupy.float32)
        cupy.cuda.Device(rank).synchronize()

        def barrier() -> None:
            comm.allReduce(token.data.ptr, token.data.ptr, 1, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
            stream.synchronize()

        rows = []
        for size in sizes:
            count = size // 2
            send = cupy.full(count, BF16_ONE, dtype=cupy.uint16)
            recv = cupy.full(count, 0xFFFF, dtype=cupy.uint16)  # poisoned: NaN in bf16
            cupy.cuda.Device(rank).synchronize()

            def call(send=send, recv=recv, count=count) -> None:
                comm.allReduce(send.data.ptr, recv.data.ptr, count, dtype, nccl.NCCL_SUM, stream.ptr)

            call()
            stream.synchronize()
            wrong = int(cupy.count_nonzero(recv != bf16_bits(world)))
            for _ in range(warmup):
                call()
            stream.synchronize()
            seconds = []
            for _ in range(windows):
                barrier()
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                for _ in range(calls):
                    call()
                stop.record(stream)
                stop.synchronize()
                seconds.append(cupy.cuda.get_elapsed_time(start, stop) / 1000.0 / calls)
            rows.append({"size_bytes": count * 2, "seconds": seconds, "wrong": wrong})
            del send, recv
            cupy.get_default_memory_pool().free_all_blocks()
        comm.destroy()
        conn.send(
            (
                "ok",
                {
                    "rank": rank,
                    "rows": rows,
                    "nccl_version": nccl.get_version(),
                    "cupy": cupy.__version__,
                    "safe_env": {k: os.environ.get(k) for k in SAFE_ENV},
                    "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
                },
            )
        )
    except BaseException as exc:  # report, never hang the parent
        conn.send(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run(sizes: list[int], windows: int, warmup: int, calls: int, timeout_s: float) -> dict[str, Any]:
    """Spawn one rank per GPU, gather their windows, reduce them to busbw per size."""
    from cupy.cuda import nccl, runtime

    if not getattr(nccl, "available", True):
        return {"status": "error", "error": "cupy.cuda.nccl is not available (no NCCL library found)"}
    world = runtime.getDeviceCount()
    uid = nccl.get_unique_id()
    ctx = multiprocessing.get_context("spawn")
    ranks = []
    for rank in range(world):
        receiver, sender = ctx.Pipe(duplex=False)
        process = ctx.Process(
            target=_rank_main, args=(rank, world, uid, sizes, windows, warmup, calls, sender), daemon=True
        )
        process.start()
        sender.close()
        ranks.append((process, receiver))
    deadline = time.monotonic() + timeout_s
    answers: list[Any] = []
    errors: list[str] = []
    for process, receiver in ranks:
        remaining = max(0.0, deadline - time.monotonic())
        if receiver.poll(remaining):
            try:
                kind, payload = receiver.recv()
            except EOFError:
                kind, payload = "error", f"a rank died without a result (exit {process.exitcode})"
            (answers if kind == "ok" else errors).append(payload)
        else:
            errors.append(f"no result within {timeout_s:g} s")
    for process, _ in ranks:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)
    if errors:
        return {"status": "error", "error": "; ".join(errors), "world_size": world}
    return {"status": "ok", **reduce_ranks(answers, world)}


def reduce_ranks(answers: list[dict[str, Any]], world: int) -> dict[str, Any]:
    """Per size: window times averaged over ranks, the median window, algbw and busbw."""
    factor = 2.0 * (world - 1) / world
    rows = []
    for k, first in enumerate(answers[0]["rows"]):
        size = first["size_bytes"]
        per_window = [
            statistics.fmean(a["rows"][k]["seconds"][w] for a in answers)
            for w in range(len(first["seconds"]))
        ]
        t = statistics.median(per_window)
        rows.append(
            {
                "size_bytes": size,
                "time_us": t * 1e6,
                "algbw_gbs": size / t / 1e9,
                "busbw_gbs": size / t / 1e9 * factor,
                "windows_busbw_gbs": [round(size / s / 1e9 * factor, 3) for s in per_window],
                "wrong": sum(a["rows"][k]["wrong"] for a in answers),
            }
        )
    return {
        "world_size": world,
        "bus_factor": factor,
        "rows": rows,
        "nccl_version": answers[0]["nccl_version"],
        "cupy": answers[0]["cupy"],
        "safe_env_per_rank": [a["safe_env"] for a in answers],
        "nccl_env": answers[0]["nccl_env"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", default="64,128,256,512,1024")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10, help="all-reduces queued per timed window")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before the ranks are killed")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args(argv)
    sizes = [int(s) * MiB for s in args.sizes_mib.split(",") if s.strip()]
    started = time.monotonic()
    result = {
        "tool": "bench/nccl_reference.py (cupy.cuda.nccl, one process per GPU, CUDA events)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "dtype": "bf16",
        "windows": args.windows,
        "warmup": args.warmup,
        "calls_per_window": args.calls,
        **run(sizes, args.windows, args.warmup, args.calls, args.timeout),
    }
    result["wall_s"] = time.monotonic() - started
    if result["status"] == "ok":
        for row in result["rows"]:
            print(
                f"nccl reference n={result['world_size']} {row['size_bytes'] >> 20} MiB: busbw "
                f"{row['busbw_gbs']:.1f} algbw {row['algbw_gbs']:.1f} GB/s, {row['time_us']:.0f} us, "
                f"wrong {row['wrong']}"
            )
    else:
        print(f"nccl reference: {result['error']}", file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
