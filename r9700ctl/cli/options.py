"""Options every inventory-driven command shares, defined once so their help and env vars agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

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
