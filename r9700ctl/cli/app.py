"""State shared by every command: output settings, put on the Click context."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

PIPE_WIDTH = 1000  # wider than any table r9700ctl prints: tables keep their natural width


@dataclass
class Application:
    verbosity: int = 0

    @property
    def plain(self) -> bool:
        """Plain lines (no colour, no live display) when not on a terminal or NO_COLOR is set."""
        return bool(os.environ.get("NO_COLOR")) or not sys.stdout.isatty()

    def console(self, stderr: bool = False):
        from rich.console import Console

        stream = sys.stderr if stderr else sys.stdout
        # A pipe or a file has no width: rich would assume 80 columns and wrap tables (and cut
        # errors) there. Tables get their natural width instead; COLUMNS still rules when set.
        width = None if stream.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
        return Console(stderr=stderr, no_color=self.plain, highlight=False, soft_wrap=True, width=width)
