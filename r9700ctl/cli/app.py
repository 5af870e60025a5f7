"""State shared by every command: output settings, put on the Click context."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass
class Application:
    verbosity: int = 0

    @property
    def plain(self) -> bool:
        """Plain lines (no colour, no live display) when not on a terminal or NO_COLOR is set."""
        return bool(os.environ.get("NO_COLOR")) or not sys.stdout.isatty()

    def console(self, stderr: bool = False):
        from rich.console import Console

        return Console(stderr=stderr, no_color=self.plain, highlight=False, soft_wrap=True)
