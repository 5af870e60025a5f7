"""Run GPU work in child processes with a deadline, so a hung kernel or collective is a result.

Every step runs in a "spawn" child (fresh CUDA/HIP state, torch imported only there) that
makes itself a session and process-group leader first thing; on timeout the whole group is
SIGKILLed, so helpers a step started die with it. The parent never imports torch.

`run_in_child` runs one function; `run_ranks` runs one process per rank through
torch.distributed (MASTER_ADDR=127.0.0.1 and a free port), the shape of all-reduce, scaling
and stability steps. Both return a StepOutcome and never raise for what happens in a child.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

OK = "ok"
TIMEOUT = "timeout"
ERROR = "error"

# After one rank fails, the others usually block in a collective forever: give them this long
# to finish on their own, then kill them.
RANK_FAILURE_GRACE_S = 5.0
# How long a killed child may take to be reaped before we stop waiting for it.
REAP_TIMEOUT_S = 5.0
# The tail of a step's stdout/stderr kept in its outcome (RCCL/HIP warnings are evidence).
OUTPUT_TAIL_CHARS = 20000


@dataclass
class StepOutcome:
    """What a child step gave back: status "ok" | "timeout" | "error"."""

    step_id: str
    status: str
    value: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    duration_s: float = 0.0
    values: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step_id,
            "status": self.status,
            "error": self.error,
            "duration_s": round(self.duration_s, 3),
        }


def _context() -> Any:
    return multiprocessing.get_context("spawn")


def _become_group_leader(output_path: str | None = None) -> None:
    # Own session => own process group: killpg(child pid) reaches every descendant.
    with contextlib.suppress(OSError):  # already a leader: harmless
        os.setsid()
    _die_with_parent()
    if output_path:
        # fd-level redirection: catches C-level output of HIP/CUDA/RCCL too, and keeps the agent's
        # own stdout (the table) and stderr (one-line errors) clean. The parent reads the file even
        # when it had to kill us.
        fd = os.open(output_path, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this child when the agent dies (even by SIGKILL): no orphaned GPU work."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        parent = multiprocessing.parent_process()
        if parent is not None and os.getppid() != parent.pid:  # the agent died before prctl took effect
            os._exit(1)


def _new_output_file() -> str:
    fd, path = tempfile.mkstemp(prefix="r9700ctl-step-", suffix=".log")
    os.close(fd)
    return path


def _read_output(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - OUTPUT_TAIL_CHARS * 2))
            return fh.read()[-OUTPUT_TAIL_CHARS:]
    except OSError:
        return ""
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _send(conn: Connection, kind: str, payload: Any) -> None:
    try:
        conn.send((kind, payload))
    finally:
        conn.close()


def _encode_value(value: Any) -> str:
    """JSON text of the step's dict: a non-dict or non-JSON value is the step's own bug."""
    if not isinstance(value, dict):
        raise TypeError(f"step function returned {type(value).__name__}, expected a dict")
    return json.dumps(value, allow_nan=True)


def _child_main(
    conn: Connection,
    fn: Callable[..., Any],
    args: tuple,
    env: dict[str, str] | None,
    output_path: str | None = None,
) -> None:
    _become_group_leader(output_path)
    try:
        if env:
            os.environ.update(env)
        _send(conn, OK, _encode_value(fn(*args)))
    except BaseException:
        _send(conn, ERROR, traceback.format_exc(limit=20))


def _rank_main(
    conn: Connection,
    rank: int,
    world_size: int,
    device: int | None,
    backend: str,
    fn: Callable[..., Any],
    args: tuple,
    env: dict[str, str],
    timeout_s: float,
    output_path: str | None = None,
) -> None:
    _become_group_leader(output_path)
    failed_at: float | None = None
    try:
        os.environ.update(env)
        import datetime

        import torch
        import torch.distributed as dist

        if backend == "nccl" and device is not None:
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend=backend,
            init_method="env://",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=max(timeout_s, 10.0)),
        )
        try:
            value = fn(rank, world_size, *args)
        except BaseException:
            # When this rank failed, before tearing down the group makes its peers fail too:
            # the parent names the earliest failure as the cause.
            failed_at = time.time()
            raise
        finally:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        _send(conn, OK, _encode_value(value))
    except BaseException:
        _send(conn, ERROR, (failed_at or time.time(), traceback.format_exc(limit=20)))


def _kill_group(process: Any) -> None:
    """SIGKILL the child's process group (its descendants too), then the child itself."""
    pid = process.pid
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if process.is_alive():
        process.kill()


def _exit_text(process: Any) -> str:
    # The pipes close a moment before the process becomes reapable: wait for it.
    process.join(REAP_TIMEOUT_S)
    code = process.exitcode
    if code is None:
        return "child did not exit"
    if code < 0:
        try:
            return f"child killed by {signal.Signals(-code).name} without a result"
        except ValueError:
            return f"child killed by signal {-code} without a result"
    return f"child exited with code {code} without a result"


def _decode(kind: str, payload: Any) -> tuple[str, dict[str, Any], str]:
    if kind == OK:
        try:
            return OK, json.loads(payload), ""
        except ValueError as exc:
            return ERROR, {}, f"step returned undecodable JSON: {exc}"
    if isinstance(payload, tuple):  # (failed_at, traceback) from a rank
        payload = payload[1]
    return ERROR, {}, str(payload).strip()


def run_in_child(
    step_id: str,
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> StepOutcome:
    """Run `fn(*args)` in a spawned child; kill its process group after `timeout_s` seconds."""
    ctx = _context()
    receiver, sender = ctx.Pipe(duplex=False)
    output_path = _new_output_file()
    process = ctx.Process(
        target=_child_main,
        args=(sender, fn, tuple(args), dict(env or {}), output_path),
        name=f"r9700-{step_id}",
    )
    started = time.monotonic()
    try:
        process.start()
    except Exception as exc:  # e.g. fn not picklable: the caller's bug, but still a result
        receiver.close()
        sender.close()
        _read_output(output_path)
        return StepOutcome(step_id, ERROR, error=f"could not start child: {type(exc).__name__}: {exc}")
    sender.close()  # our copy: lets recv() see EOF if the child dies without sending
    deadline = started + timeout_s
    try:
        status, value, error = _await_one(process, receiver, deadline, timeout_s)
    finally:  # also when the agent itself is interrupted: no child and no output file left behind
        if process.is_alive():
            _kill_group(process)
        process.join(REAP_TIMEOUT_S)
        receiver.close()
        output = _read_output(output_path)
    return StepOutcome(step_id, status, value, error, time.monotonic() - started, output=output)


def _await_one(process: Any, receiver: Connection, deadline: float, timeout_s: float) -> tuple:
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _kill_group(process)
            return TIMEOUT, {}, f"no result within {timeout_s:g} s; process group killed"
        ready = wait([receiver, process.sentinel], timeout=remaining)
        if receiver in ready:
            try:
                kind, payload = receiver.recv()
            except (EOFError, OSError):
                process.join(REAP_TIMEOUT_S)
                return ERROR, {}, _exit_text(process)
            process.join(REAP_TIMEOUT_S)
            return _decode(kind, payload)
        if process.sentinel in ready:
            # The child exited; a result sent just before exit is still in the pipe.
            if receiver.poll(0):
                continue
            return ERROR, {}, _exit_text(process)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(
    step_id: str,
    world_size: int,
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    *,
    timeout_s: float,
    backend: str = "nccl",
    env: dict[str, str] | None = None,
    gpus: Sequence[int] | None = None,
) -> StepOutcome:
    """Run `fn(rank, world_size, *args)` in `world_size` spawned processes joined by torch.distributed.

    `value` is rank 0's dict and `values` every rank's; any rank failing or the deadline passing
    fails the step and kills every rank's process group.
    """
    if world_size < 1:
        return StepOutcome(step_id, ERROR, error=f"world_size must be >= 1, got {world_size}")
    devices = list(gpus) if gpus is not None else list(range(world_size))
    if backend == "nccl" and len(devices) < world_size:
        return StepOutcome(step_id, ERROR, error=f"{world_size} ranks need {world_size} GPUs, got {devices}")
    ctx = _context()
    port = free_port()
    ranks: list[tuple[Any, Connection]] = []
    output_path = _new_output_file()  # all ranks append to one file
    started = time.monotonic()
    try:
        for rank in range(world_size):
            device = devices[rank] if rank < len(devices) else None
            rank_env = dict(env or {})
            rank_env.update(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                RANK=str(rank),
                WORLD_SIZE=str(world_size),
                LOCAL_RANK=str(device if device is not None else rank),
            )
            receiver, sender = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=_rank_main,
                args=(
                    sender,
                    rank,
                    world_size,
                    device,
                    backend,
                    fn,
                    tuple(args),
                    rank_env,
                    timeout_s,
                    output_path,
                ),
                name=f"r9700-{step_id}-rank{rank}",
            )
            process.start()
            sender.close()
            ranks.append((process, receiver))
        status, values, error = _await_ranks(ranks, started + timeout_s, timeout_s)
    except Exception as exc:
        status, values, error = ERROR, [], f"could not start ranks: {type(exc).__name__}: {exc}"
    finally:  # also when the agent itself is interrupted: no rank and no output file left behind
        for process, receiver in ranks:
            if process.is_alive():
                _kill_group(process)
            process.join(REAP_TIMEOUT_S)
            receiver.close()
        output = _read_output(output_path)
    value = values[0] if values and status == OK else {}
    all_values = values if status == OK else []
    return StepOutcome(step_id, status, value, error, time.monotonic() - started, all_values, output=output)


def _await_ranks(ranks: list[tuple[Any, Connection]], deadline: float, timeout_s: float) -> tuple:
    results: dict[int, dict[str, Any]] = {}
    errors: dict[int, tuple[float, str]] = {}
    pending = dict(enumerate(ranks))
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            waiting = ", ".join(str(r) for r in sorted(pending))
            for process, _ in pending.values():
                _kill_group(process)
            if errors:
                return ERROR, [], _rank_errors(errors)
            return (
                TIMEOUT,
                [],
                f"ranks {waiting} gave no result within {timeout_s:g} s; process groups killed",
            )
        handles = []
        for process, receiver in pending.values():
            handles += [receiver, process.sentinel]
        ready = wait(handles, timeout=remaining)
        for rank, (process, receiver) in list(pending.items()):
            failed_at = time.time()
            if receiver in ready or (process.sentinel in ready and receiver.poll(0)):
                try:
                    kind, payload = receiver.recv()
                    status, value, error = _decode(kind, payload)
                    if isinstance(payload, tuple):
                        failed_at = float(payload[0])
                except (EOFError, OSError):
                    status, value, error = ERROR, {}, _exit_text(process)
            elif process.sentinel in ready:
                status, value, error = ERROR, {}, _exit_text(process)
            else:
                continue
            del pending[rank]
            if status == OK:
                results[rank] = value
            else:
                errors[rank] = (failed_at, error)
                # The survivors will wait in a collective for the dead rank: short grace, then kill.
                deadline = min(deadline, time.monotonic() + RANK_FAILURE_GRACE_S)
    if errors:
        return ERROR, [], _rank_errors(errors)
    return OK, [results[r] for r in sorted(results)], ""


def _rank_errors(errors: dict[int, tuple[float, str]]) -> str:
    """The first rank to fail (in time) is the cause; the others usually died of its absence."""
    order = sorted(errors, key=lambda r: (errors[r][0], r))
    first, others = order[0], order[1:]
    suffix = f" (then ranks {', '.join(map(str, others))} failed too)" if others else ""
    return f"rank {first} failed: {errors[first][1]}{suffix}"
