"""Top-level step functions for the watchdog tests: spawned children import them by name."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def echo(value: int) -> dict:
    return {"value": value, "pid": os.getpid(), "pgid": os.getpgid(0)}


def read_env(name: str) -> dict:
    return {"value": os.environ.get(name)}


def sleep_forever() -> dict:
    time.sleep(3600)
    return {}


def spawn_grandchild_then_hang(pid_file: str) -> dict:
    """Start a helper process (like a multi-process step would), record its pid, then hang."""
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    Path(pid_file).write_text(str(helper.pid))
    time.sleep(3600)
    return {}


def raise_error() -> dict:
    raise RuntimeError("the kernel found 3 wrong values")


def die_by_signal() -> dict:
    os.kill(os.getpid(), 9)
    return {}


def return_list() -> dict:
    return [1, 2]  # type: ignore[return-value]


def noisy(text: str) -> dict:
    print(text)
    print(text + " on stderr", file=sys.stderr)
    os.write(2, b"C-level write\n")
    return {"ok": True}


def rank_sum(rank: int, world_size: int, scale: int) -> dict:
    """All-reduce (rank + 1) * scale over gloo: the sum is scale * n(n+1)/2 on every rank."""
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([float((rank + 1) * scale)])
    dist.all_reduce(tensor)
    return {"rank": rank, "world_size": world_size, "sum": tensor.item(), "env_rank": os.environ["RANK"]}


def rank_one_fails(rank: int, world_size: int) -> dict:
    import torch
    import torch.distributed as dist

    if rank == 1:
        raise ValueError("rank 1 saw corrupted data")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)  # blocks forever: rank 1 never joins
    return {"rank": rank}


def rank_hangs(rank: int, world_size: int) -> dict:
    time.sleep(3600)
    return {}


def write_pid_then_hang(pid_file: str) -> dict:
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(3600)
    return {}
