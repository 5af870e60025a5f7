"""`r9700ctl validate` (not built yet)."""

from __future__ import annotations

import click

from r9700ctl.errors import not_built


@click.command()
@click.argument("inventory", required=False)
def validate(inventory: str | None) -> None:
    """Measure every GPU, link and node and judge the figures.

    \b
    Example:
      r9700ctl validate inventory.ini --level quick
      r9700ctl validate --local --level config
    """
    raise not_built("validate")
