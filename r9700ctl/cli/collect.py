"""`r9700ctl collect` (not built yet)."""

from __future__ import annotations

import click

from r9700ctl.errors import not_built


@click.command()
@click.argument("inventory", required=False)
def collect(inventory: str | None) -> None:
    """Gather each node's support bundle (recorded tool outputs) into a directory.

    \b
    Example:
      r9700ctl collect inventory.ini --out ./support
    """
    raise not_built("collect")
