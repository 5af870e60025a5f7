"""Options every inventory-driven command shares, defined once so their help and env vars agree."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from r9700ctl.errors import BadInput, CannotRun
from r9700ctl.inventory import DEFAULT_GROUP

inventory_argument = click.argument("inventory", metavar="INVENTORY", type=click.Path(path_type=Path))

group_option = click.option(
    "--group",
    "-g",
    default=DEFAULT_GROUP,
    show_default=True,
    envvar="R9700CTL_GROUP",
    show_envvar=True,
    help="Inventory group holding the nodes.",
)

limit_option = click.option(
    "--limit",
    "-l",
    metavar="PATTERN",
    help="Only these hosts of the group (Ansible host pattern: node1,node2 or 'rack1:!node3').",
)


def check_json_path(json_path: str | None) -> None:
    """Refuse an unwritable --json PATH before any work starts ('-' means standard output)."""
    if json_path is None or json_path == "-":
        return
    path = Path(json_path).expanduser()
    if path.is_dir():
        raise BadInput(
            what="--json needs a file path, this is a directory", where=json_path, hint="add a file name"
        )
    if not path.resolve().parent.is_dir():
        raise BadInput(
            what=f"--json: directory {path.parent} does not exist",
            where=json_path,
            hint="create the directory first or give another path",
        )


def write_json_output(json_path: str | None, document: dict[str, Any]) -> None:
    """--json PATH: write the document atomically; '-': print it on standard output."""
    if json_path is None:
        return
    if json_path == "-":
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    from r9700ctl.report import write_json

    try:
        write_json(Path(json_path), document)
    except OSError as exc:
        raise CannotRun(
            what=f"cannot write the JSON report: {exc.strerror or exc}",
            where=json_path,
            hint="give a writable path with --json",
        ) from exc
