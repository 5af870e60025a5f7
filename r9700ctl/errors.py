"""The one exception family of the controller.

Library code raises these; only the CLI turns them into one line and an exit code
(docs/architecture.md, Contracts). Each error says what is wrong, where, and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_WARN = 1
EXIT_FAIL = 2
EXIT_CANNOT_RUN = 3
EXIT_INCONCLUSIVE = 4  # validate: ran, nothing failed, something could not be judged
EXIT_BAD_INPUT = 64


@dataclass
class R9700Error(Exception):
    """Base error: `what` happened at `where`; `hint` says what to do."""

    what: str
    where: str = ""
    hint: str = ""
    exit_code: int = EXIT_FAIL

    def __post_init__(self) -> None:
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = f"{self.where}: {self.what}" if self.where else self.what
        if self.hint:
            text += f" ({self.hint})"
        return text


@dataclass
class BadInput(R9700Error):
    """Bad inventory, option, variable or bundle: nothing was contacted (exit 64)."""

    exit_code: int = EXIT_BAD_INPUT


@dataclass
class CannotRun(R9700Error):
    """A prerequisite is missing or a host could not be reached (exit 3)."""

    exit_code: int = EXIT_CANNOT_RUN


def not_built(command: str) -> CannotRun:
    """The error a command gives while its work is not built yet."""
    return CannotRun(
        what=f"'{command}' is not built yet in r9700ctl {_version()}",
        hint="see the README's roadmap; nothing was changed",
    )


def _version() -> str:
    from r9700ctl import __version__

    return __version__
