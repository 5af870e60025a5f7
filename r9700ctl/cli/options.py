"""Options every inventory-driven command shares, defined once so their help and env vars agree."""

from __future__ import annotations

from pathlib import Path

import click

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
