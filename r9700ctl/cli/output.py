"""How every command hands back what it found: the --json option, its text, one exit.

A command makes one `Output` where it checks its options (an unwritable --json PATH is refused
then, before any host is contacted), prints its text through it (`line`, `lines`, `table`,
`progress`) and ends with `finish(document, code)`: the JSON document goes to the file, or to
standard output for '-', and the command exits with the contract's code through Click's context
(cli.main turns that into the process's exit status; errors go through cli.main alone).

With `--json -` standard output holds the document alone. The command's text then goes to
standard error, or, for the commands whose document replaces their text (`replaces_text`),
nowhere. `json_option()` writes the option's help from the same choice, so the two agree.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from r9700ctl.errors import BadInput, CannotRun

if TYPE_CHECKING:
    from r9700ctl.cli.app import Application

TEXT_TO_STDERR = "(the text then goes to standard error)"
TEXT_REPLACED = "instead of the text"


def json_option(what: str, schema: str, *, replaces_text: bool = False) -> Callable[[Any], Any]:
    """The --json PATH option of a command: `what` it writes, under which schema id."""
    dash = TEXT_REPLACED if replaces_text else TEXT_TO_STDERR
    return click.option(
        "--json",
        "json_path",
        metavar="PATH",
        help=f"Also write {what} as JSON (schema {schema}) to PATH; '-' prints it on standard output {dash}.",
    )


def file_option(*names: str, help: str) -> Callable[[Any], Any]:
    """An option naming a file r9700ctl writes (--html, --prom, --junit, -o): a path, never a
    directory; the command checks it with check_output_path before any work starts."""
    return click.option(*names, type=click.Path(dir_okay=False, path_type=Path), metavar="PATH", help=help)


class Output:
    """One command's way out: its console, its JSON document and its exit code."""

    def __init__(
        self, app: Application, json_path: str | Path | None, *, replaces_text: bool = False
    ) -> None:
        self.json_path = None if json_path is None else str(json_path)
        check_json_path(self.json_path)
        self.app = app
        self.to_stdout = self.json_path == "-"
        self.shows_text = not (self.to_stdout and replaces_text)
        self.console = app.console(stderr=self.to_stdout)

    @property
    def plain(self) -> bool:
        """Plain lines, no live display: not a terminal, NO_COLOR, or stdout taken by the JSON."""
        return self.app.plain or self.to_stdout

    def line(self, text: str) -> None:
        if self.shows_text:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def lines(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.line(text)

    def echo(self, text: str, nl: bool = True) -> None:
        """Text passed on as it is, a child's output line or a whole page (stdout, or stderr beside
        JSON on stdout)."""
        if self.shows_text:
            click.echo(text, err=self.to_stdout, nl=nl)

    def note(self, text: str) -> None:
        """A line about the run itself (history, runtime): always standard error."""
        click.echo(text, err=True)

    def table(self, renderable: Any) -> None:
        """A rich table: plain lines that end at their text, or the styled table on a terminal."""
        if not self.shows_text:
            return
        if self.app.plain:
            from r9700ctl.report import print_plain

            print_plain(self.console, renderable)
        else:
            self.console.print(renderable)

    def progress(self, verbosity: int = 0) -> Any:
        """The live or plain progress display of an Ansible run (r9700ctl.report.progress)."""
        from r9700ctl.report.progress import renderer

        return renderer(self.console, plain=self.plain, verbosity=verbosity)

    def finish(self, document: Mapping[str, Any] | None, code: int = 0) -> NoReturn:
        """Write the JSON document (when --json was given and there is one), then exit with `code`."""
        if document is not None:
            write_json_output(self.json_path, dict(document))
        click.get_current_context().exit(code)


def check_json_path(json_path: str | None) -> None:
    """Refuse an unwritable --json PATH before any work starts ('-' means standard output)."""
    if json_path is None or json_path == "-":
        return
    check_output_path("--json", Path(json_path))


def check_output_path(flag: str, path: Path) -> None:
    """Refuse an output file that cannot be written, before any work starts.

    The writers are atomic (a hidden .tmp file beside PATH, then a rename), so what must hold is:
    PATH is not a directory or a special file (a FIFO, /dev/stdout: use '-'), its directory
    exists, a file can be created there and, when PATH exists, a file can be renamed over it.
    The last two are tried for real with probe files, removed at once: permissions, a read-only
    mount, /proc, an immutable file and another user's file in a sticky directory all answer the
    check the way they would answer the writer (_try_replacing leaves the existing file as it was).
    """
    path = path.expanduser()
    where = str(path)
    if str(path.absolute()).startswith(("/dev/", "/proc/")):
        # /dev/stdout, /dev/fd/N, /proc/self/fd/N: a terminal, a pipe or the shell's redirect,
        # which an atomic rename would replace instead of writing into.
        raise BadInput(
            what=f"{flag} writes a file, not a device or a stream",
            where=where,
            hint="give '-' to print JSON on standard output" if flag == "--json" else "give a file path",
        )
    if path.is_dir():
        raise BadInput(
            what=f"{flag} needs a file path, this is a directory", where=where, hint="add a file name"
        )
    path = Path(os.path.realpath(path)) if path.is_symlink() else path  # the writer follows it
    if path.exists() and not path.is_file():
        raise BadInput(
            what=f"{flag} writes a regular file, this is not one",
            where=where,
            hint="give a file path ('-' prints JSON on standard output)"
            if flag == "--json"
            else "give a file path",
        )
    parent = path.parent
    if not parent.is_dir():
        raise BadInput(
            what=f"{flag}: directory {parent} does not exist",
            where=where,
            hint="create the directory first or give another path",
        )
    try:
        probe, probe_path = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
        os.close(probe)
        os.unlink(probe_path)
    except OSError as exc:
        raise BadInput(
            what=f"{flag}: cannot write in {parent} ({exc.strerror or exc})",
            where=where,
            hint="give a path in a directory you can write to",
        ) from None
    if path.exists():
        _try_replacing(flag, path, where)


RENAME_EXCHANGE = 2  # <linux/fs.h>; renameat2(2) since Linux 3.15, glibc 2.28 (man 2 rename)


def _try_replacing(flag: str, path: Path, where: str) -> None:
    """Refuse an existing PATH that the writer's os.replace could not rename a file over.

    A probe beside PATH is swapped with it by renameat2(RENAME_EXCHANGE) and swapped back: the
    kernel judges a swap as it judges a rename over PATH (man 2 rename: EPERM where the directory
    is sticky and the file is neither the caller's nor the directory's owner's; man 1 chattr: a
    file marked 'i' cannot be renamed, 'a' likewise), so nothing is guessed. PATH names a file
    at every instant, and afterwards the same file (same inode, same bytes; only its ctime moves);
    for the microseconds between the swaps a reader would find the empty probe there. Where the
    file system cannot swap (EINVAL: NFS, FAT), the sticky-directory rule is applied by hand.
    """
    fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
    os.close(fd)
    try:
        errno_ = _exchange(probe, path)
        if errno_ == 0:
            if _exchange(probe, path) != 0:
                os.replace(probe, path)  # the original, back under its name whatever happened
            return
        if errno_ in (errno.EINVAL, errno.ENOSYS):
            errno_ = errno.EPERM if _sticky_and_not_ours(path) else 0
        if errno_:
            raise BadInput(
                what=f"{flag}: cannot replace the existing file ({os.strerror(errno_)})",
                where=where,
                hint=_why_not_replaceable(path, errno_),
            )
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)


def _exchange(one: str | Path, other: str | Path) -> int:
    """renameat2(one, other, RENAME_EXCHANGE): 0, or the errno (ENOSYS where libc lacks it)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return errno.ENOSYS
    at_fdcwd = -100
    done = renameat2(at_fdcwd, os.fsencode(one), at_fdcwd, os.fsencode(other), RENAME_EXCHANGE)
    return 0 if done == 0 else ctypes.get_errno()


def _sticky_and_not_ours(path: Path) -> bool:
    """man 2 rename, EPERM: a sticky directory lets only the file's owner, the directory's owner
    or a privileged process rename over a file."""
    directory, file = os.stat(path.parent), os.stat(path)
    return bool(directory.st_mode & stat.S_ISVTX) and os.geteuid() not in (
        0,
        file.st_uid,
        directory.st_uid,
    )


def _why_not_replaceable(path: Path, errno_: int) -> str:
    if errno_ in (errno.EPERM, errno.EACCES) and _sticky_and_not_ours(path):
        return (
            f"it belongs to uid {os.stat(path).st_uid} in a sticky directory: give another path, "
            "or have its owner remove it"
        )
    if errno_ == errno.EPERM:
        return (
            "it is marked immutable or append-only: lsattr shows i or a, chattr -i or -a as root "
            "clears it; or give another path"
        )
    return "give another path"


def write_output(flag: str, path: Path, text: str) -> None:
    """Write an output file atomically; a failure after the checks (disk full) is one line."""
    from r9700ctl.agent.atomic import write_atomic

    try:
        write_atomic(path.expanduser(), text)
    except OSError as exc:
        raise CannotRun(
            what=f"cannot write {flag}: {exc.strerror or exc}",
            where=str(path),
            hint=f"give a writable path with {flag}",
        ) from exc


def write_json_output(json_path: str | None, document: dict[str, Any]) -> None:
    """--json PATH: write the document atomically; '-': print it on standard output."""
    from r9700ctl.agent.atomic import json_text

    if json_path is None:
        return
    if json_path == "-":
        sys.stdout.write(json_text(document))
        return
    write_output("--json", Path(json_path), json_text(document))
