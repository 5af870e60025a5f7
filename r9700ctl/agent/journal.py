"""A journal that survives a host reset: what step on which GPUs was running when the node died.

One JSONL file per run (`journal.jsonl`; the previous run's file is kept as `journal.prev.jsonl`).
Every record is written, flushed and fsync'd before the work it announces starts, and the
directory is fsync'd when files appear or are renamed, so a BMC reset in the middle of a P2P
step (ROCm/rocm-systems#11348) leaves a `step_start` without its `step_end` on disk. The next
run compares the boot id (/proc/sys/kernel/random/boot_id): a different boot means the host
died during that step; the same boot means only the agent was killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOURNAL_NAME = "journal.jsonl"
PREVIOUS_NAME = "journal.prev.jsonl"
LOCK_NAME = "agent.lock"


class JournalError(Exception):
    """The journal directory cannot be used (not writable, or another agent holds it)."""


def read_boot_id(root: Path) -> str:
    """This boot's id, or "" where the kernel does not expose one."""
    try:
        return (root / "proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Interrupted:
    """What the previous run left unfinished."""

    run_id: str
    level: str
    started: str
    boot_id: str
    rebooted: bool
    open_steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def last_step(self) -> dict[str, Any] | None:
        return self.open_steps[-1] if self.open_steps else None


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records of one journal file; a torn last line (power loss mid-write) is skipped."""
    records = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def find_interrupted(records: list[dict[str, Any]], current_boot_id: str) -> Interrupted | None:
    """The last run in `records` if it did not end, with the steps it left open."""
    starts = [i for i, r in enumerate(records) if r.get("type") == "run_start"]
    if not starts:
        return None
    run = records[starts[-1] :]
    head = run[0]
    open_steps: dict[int, dict[str, Any]] = {}
    for record in run:
        if record.get("type") == "step_start":
            open_steps[int(record.get("seq", -1))] = record
        elif record.get("type") == "step_end":
            open_steps.pop(int(record.get("seq", -1)), None)
    # A run that ended cleanly has nothing to report; one stopped (SIGTERM) inside a step still does.
    if any(r.get("type") == "run_end" for r in run) and not open_steps:
        return None
    boot_id = str(head.get("boot_id", ""))
    return Interrupted(
        run_id=str(head.get("run_id", "")),
        level=str(head.get("level", "")),
        started=str(head.get("time", "")),
        boot_id=boot_id,
        rebooted=bool(boot_id and current_boot_id and boot_id != current_boot_id),
        open_steps=[open_steps[k] for k in sorted(open_steps)],
    )


class Journal:
    """The journal of this run; `open()` first, which also reads what the previous run left."""

    def __init__(self, directory: Path, boot_id: str) -> None:
        self.directory = directory
        self.boot_id = boot_id
        self.path = directory / JOURNAL_NAME
        self.run_id = uuid.uuid4().hex[:12]
        self._file: Any = None
        self._lock: Any = None
        self._seq = 0

    def open(self, level: str) -> Interrupted | None:
        """Lock the directory, keep the previous journal, start this run's; return the previous run's gaps."""
        created = not self.directory.exists()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if created:
                _fsync_dir(self.directory.parent)
            self._lock = open(self.directory / LOCK_NAME, "a+")  # noqa: SIM115 (held for the whole run)
        except OSError as exc:
            raise JournalError(
                f"cannot write the journal directory {self.directory}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "unknown"
            self._lock.close()
            self._lock = None
            raise JournalError(
                f"another r9700ctl agent (pid {holder}) is running with journal {self.directory}"
            ) from exc
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(str(os.getpid()))
        self._lock.flush()
        previous = find_interrupted(read_records(self.path), self.boot_id)
        if self.path.exists():
            os.replace(self.path, self.directory / PREVIOUS_NAME)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        _fsync_dir(self.directory)
        self.write("run_start", run_id=self.run_id, boot_id=self.boot_id, level=level, pid=os.getpid())
        return previous

    def write(self, kind: str, **fields: Any) -> None:
        """Append one record and make it durable before returning."""
        if self._file is None:
            return
        record = {"type": kind, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **fields}
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def step_start(self, step_id: str, gpus: list[int], timeout_s: float) -> int:
        self._seq += 1
        self.write("step_start", seq=self._seq, step=step_id, gpus=list(gpus), timeout_s=timeout_s)
        return self._seq

    def step_end(self, seq: int, step_id: str, status: str, duration_s: float) -> None:
        self.write("step_end", seq=seq, step=step_id, status=status, duration_s=round(duration_s, 3))

    def close(self, status: str) -> None:
        """Mark the run finished and release the directory."""
        if self._file is not None:
            self.write("run_end", status=status)
            self._file.close()
            self._file = None
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def default_directory() -> Path:
    return Path("/var/lib/r9700ctl")


def fallback_directory() -> Path:
    """Where an unprivileged user's journal goes when /var/lib/r9700ctl is not writable."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "r9700ctl"


def usable(directory: Path) -> bool:
    """True if the journal can live in `directory` (exists and writable, or can be created)."""
    probe = directory
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return os.access(probe, os.W_OK | os.X_OK)
