"""Reports: what a use case found, as terminal tables, lines and progress (and --html, --prom,
--junit for validate).

One module per command builds its text from the command's result object; the result's own
`to_dict()` is its JSON document (schema ids: r9700ctl.agent.schemas). The helpers here are
shared: a table printed plain, durations written the same way everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def print_plain(console: Console, renderable: Any) -> None:
    """Print a table without the padding that fills the terminal: plain lines end at their text."""
    with console.capture() as captured:
        console.print(renderable)
    for line in captured.get().splitlines():
        console.print(line.rstrip(), markup=False, highlight=False, soft_wrap=True)


def seconds(value: float) -> str:
    """A duration for people: 0.4 s, 12.3 s, 4 min 05 s."""
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(round(value), 60)
    return f"{minutes} min {secs:02d} s"
