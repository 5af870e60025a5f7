"""Progress of an Ansible run, from the runner's Progress callbacks; `renderer()` picks the kind.

LiveProgress (a terminal): one line per host with its current task and counts, redrawn in
place (rich.live); failures are printed above it as they happen.
PlainProgress (not a terminal, NO_COLOR, or stdout taken by --json -): a log that reads well in
a pipe or a CI job: per host one line for each task that changed or failed, with that task's own
counts ("node1: changed Ensure ROCm is installed (3 of 5 items changed)"), a heartbeat line while a task
runs long, never an Ansible-internal task name; -v adds every task result, -vv Ansible's output.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from r9700ctl.ansible_run import HostResult, Progress

if TYPE_CHECKING:
    from rich.console import Console

SHOWN_ALWAYS = ("failed", "unreachable")
# A task running this long gets a "still at" line, and again after as long (plain output).
HEARTBEAT_S = 30.0
# Tasks Ansible adds by itself: their names say nothing to a user of r9700ctl.
INTERNAL_TASKS = {
    "Gathering Facts": "gathering facts",
    "Validating arguments against arg spec": "checking the role's variables",
}


def display_task(task: str, role: str = "") -> str:
    """A task's name, or what an Ansible-internal task does (with its role when known)."""
    for prefix, label in INTERNAL_TASKS.items():
        if task.startswith(prefix):
            return f"{label} ({role})" if role else label
    return task


def task_label(progress: Progress) -> str:
    return display_task(progress.task, progress.role)


def is_internal(progress: Progress) -> bool:
    return any(progress.task.startswith(prefix) for prefix in INTERNAL_TASKS)


def counts(host: HostResult) -> str:
    text = f"ok={host.ok} changed={host.changed}"
    if host.failed:
        text += f" failed={host.failed}"
    if host.unreachable:
        text += f" unreachable={host.unreachable}"
    return text


def result_line(progress: Progress) -> str:
    """One task's result for one host: its outcome, the task, its own item counts, the error."""
    kind = progress.kind.upper() if progress.kind in SHOWN_ALWAYS else progress.kind
    line = f"{progress.host}: {kind} {task_label(progress)}"
    if progress.items is not None:
        changed, total = progress.items
        line += (
            f" ({changed} of {total} items changed)" if progress.kind == "changed" else f" ({total} items)"
        )
    return f"{line}: {progress.message}" if progress.message else line


def elapsed(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


class PlainProgress:
    """Plain lines; a daemon thread prints the heartbeat of tasks that run long."""

    def __init__(
        self,
        console: Console,
        verbosity: int = 0,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.verbosity = verbosity
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.running: dict[str, tuple[str, float, float]] = {}  # host -> (task, started, last line)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PlainProgress:
        if self.heartbeat_s > 0:
            self._thread = threading.Thread(target=self._beat, name="r9700ctl-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def __call__(self, progress: Progress) -> None:
        if self.verbosity >= 2 and progress.ansible_output.strip():
            self._print(progress.ansible_output.rstrip())
        now = self.clock()
        with self._lock:
            if progress.kind == "start":
                self.running[progress.host] = (task_label(progress), now, now)
                return
            self.running.pop(progress.host, None)
        shown = progress.kind in SHOWN_ALWAYS or (progress.kind == "changed" and not is_internal(progress))
        if shown or self.verbosity >= 1:
            self._print(result_line(progress))
        for warning in progress.warnings:  # always: a warning is worth a line in any log
            self._print(f"{progress.host}: WARNING {warning.removeprefix(progress.host + ': ')}")

    def heartbeat(self) -> None:
        """One "still at" line per host whose task has run heartbeat_s since its last line."""
        now = self.clock()
        with self._lock:
            due = [(h, t, s) for h, (t, s, last) in self.running.items() if now - last >= self.heartbeat_s]
            for host, task, started in due:
                self.running[host] = (task, started, now)
        for host, task, started in due:
            self._print(f"{host}: still at {task} ({elapsed(now - started)})")

    def _beat(self) -> None:
        while not self._stop.wait(min(5.0, self.heartbeat_s)):
            self.heartbeat()

    def _print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def renderer(console: Console, *, plain: bool, verbosity: int = 0) -> PlainProgress | LiveProgress:
    """The one place that picks the progress display: live on a terminal, plain lines otherwise."""
    return PlainProgress(console, verbosity) if plain else LiveProgress(console, verbosity)


class LiveProgress:
    def __init__(self, console: Console, verbosity: int = 0, hosts: list[str] | None = None) -> None:
        from rich.live import Live

        self.console = console
        self.verbosity = verbosity
        self.rows: dict[str, tuple[str, str]] = {name: ("waiting", "") for name in hosts or []}
        self._live = Live(self._table(), console=console, refresh_per_second=8, transient=True)
        self._started = False

    def __enter__(self) -> LiveProgress:
        return self  # the display starts with the first event: a password prompt may come first

    def __exit__(self, *exc: Any) -> None:
        if self._started:
            self._live.__exit__(*exc)

    def __call__(self, progress: Progress) -> None:
        if not self._started:
            self._live.__enter__()
            self._started = True
        if progress.kind in SHOWN_ALWAYS or self.verbosity >= 1:
            style = "red" if progress.kind in SHOWN_ALWAYS else "dim"
            self._live.console.print(f"[{style}]{_escape(result_line(progress))}[/]", highlight=False)
        if self.verbosity >= 2 and progress.ansible_output.strip():
            self._live.console.print(progress.ansible_output.rstrip(), markup=False, highlight=False)
        for warning in progress.warnings:
            line = _escape(f"{progress.host}: WARNING {warning.removeprefix(progress.host + ': ')}")
            self._live.console.print(f"[yellow]{line}[/]", highlight=False)
        label = task_label(progress)
        task = label if progress.kind == "start" else f"{label} [{progress.kind}]"
        self.rows[progress.host] = (task, counts(progress.counts))
        self._live.update(self._table())

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_column("host", style="bold", no_wrap=True)
        table.add_column("task", overflow="ellipsis", no_wrap=True, ratio=1)
        table.add_column("counts", no_wrap=True, style="dim")
        for host, (task, numbers) in self.rows.items():
            table.add_row(host, _escape(task), numbers)
        return table


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
