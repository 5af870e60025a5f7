"""A torchrun worker of phases 3 and 4 (run as `-m r9700ctl.agent.cluster.worker OUT_PREFIX`).

Phase 3 (smoke): gloo all-reduce of a small tensor checked against n(n+1)/2, the TCP connections
this rank holds afterwards (so the interface gloo really used is on record), then one element
through RCCL/NCCL where torch sees a GPU (the backend is chosen by the GPU). Phase 4 (collective,
R9700_CLUSTER_SWEEP set): the agent's all-reduce sweep (r9700ctl/agent/kernels/collective.py) on
the GPU backend, or on gloo over the CPU where there is none. Writes OUT_PREFIX.<rank>.json.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
from datetime import timedelta
from typing import Any

INIT_TIMEOUT_S = 60  # c10d's default is 30 min: a peer that never comes must fail this phase, not hang it


def tcp_connections() -> list[dict[str, str]]:
    """(local, remote) IPv4 addresses of this process's established TCP sockets (/proc/net/tcp)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    from r9700ctl.agent.cluster.probes import tcp_table

    return [
        {"local": _address(fields[1]), "remote": _address(fields[2])}
        for fields in tcp_table()
        if len(fields) > 9 and fields[3] == "01" and fields[9] in inodes  # 01 = ESTABLISHED
    ]


def _address(hex_pair: str) -> str:
    address, port = hex_pair.split(":")
    return f"{socket.inet_ntoa(struct.pack('<I', int(address, 16)))}:{int(port, 16)}"


def smoke(rank: int, world: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    out: dict[str, Any] = {}
    began = time.monotonic()
    tensor = torch.full((1024,), float(rank + 1))
    dist.all_reduce(tensor)
    expected = world * (world + 1) / 2
    out["gloo"] = {
        "wrong": int((tensor != expected).sum().item()),
        "expected": expected,
        "seconds": round(time.monotonic() - began, 3),
        "connections": tcp_connections(),
    }
    if not torch.cuda.is_available():
        out["gpu"] = {"ran": False, "reason": "torch sees no GPU (torch.cuda.is_available() is False)"}
        return out
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    group = dist.new_group(backend="nccl")
    one = torch.full((1,), float(rank + 1), device="cuda")
    dist.all_reduce(one, group=group)
    torch.cuda.synchronize()
    out["gpu"] = {"ran": True, "backend": "nccl", "wrong": int(one.item() != expected), "device": local}
    return out


def sweep(rank: int, world: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from r9700ctl.agent.kernels.collective import allreduce_sweep
    from r9700ctl.agent.kernels.specs import AllReduceSpec

    spec_fields = json.loads(os.environ["R9700_CLUSTER_SWEEP"])
    if torch.cuda.is_available():  # the GPU's backend (RCCL on ROCm) on a group of its own
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.destroy_process_group()
        dist.init_process_group("nccl", timeout=timedelta(seconds=INIT_TIMEOUT_S))
    return {"sweep": allreduce_sweep(rank, world, AllReduceSpec(**spec_fields))}


def main(argv: list[str]) -> int:
    import torch.distributed as dist

    prefix = argv[1]
    rank = int(os.environ["RANK"])
    result: dict[str, Any] = {"rank": rank, "node_rank": int(os.environ.get("GROUP_RANK", "0"))}
    try:
        dist.init_process_group("gloo", timeout=timedelta(seconds=INIT_TIMEOUT_S))
        world = dist.get_world_size()
        result["world_size"] = world
        result.update(sweep(rank, world) if os.environ.get("R9700_CLUSTER_SWEEP") else smoke(rank, world))
    except Exception as exc:  # the phase's verdict needs the reason, not a traceback
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        with open(f"{prefix}.{rank}.json", "w", encoding="utf-8") as fh:
            json.dump(result, fh)
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
