"""`r9700ctl verify` (not built yet)."""

from __future__ import annotations

import click

from r9700ctl.errors import not_built


@click.command()
@click.argument("inventory", required=False)
def verify(inventory: str | None) -> None:
    """Run the shipped testinfra suite against the nodes of INVENTORY.

    \b
    Example:
      r9700ctl verify inventory.ini
    """
    raise not_built("verify")
