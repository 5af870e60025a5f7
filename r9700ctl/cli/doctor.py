"""`r9700ctl doctor` (not built yet)."""

from __future__ import annotations

import click

from r9700ctl.errors import not_built


@click.command()
@click.argument("inventory", required=False)
def doctor(inventory: str | None) -> None:
    """Check that the tool can reach and work on the hosts, or diagnose a bundle.

    \b
    Example:
      r9700ctl doctor inventory.ini
      r9700ctl doctor --bundle ./support/node01
    """
    raise not_built("doctor")
