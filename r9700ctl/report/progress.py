"""Live progress of an Ansible run, from the runner's Progress callbacks.

LiveProgress (a terminal): one line per host with its current task and counts, redrawn in
place (rich.live); failures are printed above it as they happen.
PlainProgress (not a terminal, or NO_COLOR): plain lines, "node1: TASK name (ok=3 changed=1)",
one per task start, plus one per failure; -v adds every task result, -vv Ansible's own output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from r9700ctl.runner import HostResult, Progress

if TYPE_CHECKING:
    from rich.console import Console

SHOWN_ALWAYS = ("failed", "unreachable")


def counts(host: HostResult) -> str:
    text = f"ok={host.ok} changed={host.changed}"
    if host.failed:
        text += f" failed={host.failed}"
    if host.unreachable:
        text += f" unreachable={host.unreachable}"
    return text


def result_line(progress: Progress) -> str:
    line = f"{progress.host}: {progress.kind.upper()} {progress.task}"
    return f"{line}: {progress.message}" if progress.message else line


class PlainProgress:
    def __init__(self, console: Console, verbosity: int = 0) -> None:
        self.console = console
        self.verbosity = verbosity

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, progress: Progress) -> None:
        if self.verbosity >= 2 and progress.ansible_output.strip():
            self._print(progress.ansible_output.rstrip())
        if progress.kind == "start":
            self._print(f"{progress.host}: TASK {progress.task} ({counts(progress.counts)})")
        elif progress.kind in SHOWN_ALWAYS or self.verbosity >= 1:
            self._print(result_line(progress))

    def _print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


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
        task = progress.task if progress.kind == "start" else f"{progress.task} [{progress.kind}]"
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
