"""Options every inventory-driven command shares, defined once so their help and env vars agree."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from r9700ctl.errors import BadInput, CannotRun
from r9700ctl.inventory import DEFAULT_GROUP

inventory_argument = click.argument("inventory", metavar="INVENTORY", type=click.Path(path_type=Path))


def not_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """An option given as '' (an unset shell variable: --limit "$NODES") is refused, never read as
    'not given': an empty --limit would otherwise run every host of the group."""
    values = value if isinstance(value, tuple) else (value,)
    if any(item is not None and not str(item).strip() for item in values):
        raise click.BadParameter("is empty: give a value, or leave the option out")
    return value


group_option = click.option(
    "--group",
    "-g",
    default=DEFAULT_GROUP,
    show_default=True,
    envvar="R9700CTL_GROUP",
    show_envvar=True,
    callback=not_empty,
    help="Inventory group holding the nodes.",
)

limit_option = click.option(
    "--limit",
    "-l",
    metavar="PATTERN",
    callback=not_empty,
    help="Only these hosts of the group (Ansible host pattern: node1,node2 or 'rack1:!node3').",
)


def check_json_path(json_path: str | None) -> None:
    """Refuse an unwritable --json PATH before any work starts ('-' means standard output)."""
    if json_path is None or json_path == "-":
        return
    check_output_path("--json", Path(json_path))


def check_output_path(flag: str, path: Path) -> None:
    """Refuse an output file that cannot be written, before any work starts.

    The writers are atomic (a hidden .tmp file beside PATH, then a rename), so what must hold is:
    PATH is not a directory or a special file (a FIFO, /dev/stdout: use '-'), its directory
    exists, and a file can be created there. The last is tried for real (a probe file, removed
    at once): permissions, a read-only mount and /proc all answer the same way.
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


def write_output(flag: str, path: Path, text: str) -> None:
    """Write an output file atomically; a failure after the checks (disk full) is one line."""
    from r9700ctl.report.formats import write_text

    try:
        write_text(path.expanduser(), text)
    except OSError as exc:
        raise CannotRun(
            what=f"cannot write {flag}: {exc.strerror or exc}",
            where=str(path),
            hint=f"give a writable path with {flag}",
        ) from exc


def write_json_output(json_path: str | None, document: dict[str, Any]) -> None:
    """--json PATH: write the document atomically; '-': print it on standard output."""
    if json_path is None:
        return
    text = json.dumps(document, indent=2, default=str) + "\n"
    if json_path == "-":
        sys.stdout.write(text)
        return
    write_output("--json", Path(json_path), text)
