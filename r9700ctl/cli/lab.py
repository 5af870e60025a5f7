"""`r9700ctl lab` (not built yet)."""

from __future__ import annotations

import click

from r9700ctl.errors import not_built


@click.group()
def lab() -> None:
    """Throwaway test nodes on this machine (a test and demo environment, needs root)."""


@lab.command()
def up() -> None:
    """Build throwaway Debian 12 nodes and write an inventory for them."""
    raise not_built("lab up")
