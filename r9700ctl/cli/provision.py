"""`r9700ctl provision` (not built yet)."""

from __future__ import annotations

import click

from r9700ctl.errors import not_built


@click.command()
@click.argument("inventory", required=False)
def provision(inventory: str | None) -> None:
    """Provision the nodes of INVENTORY into working ROCm nodes.

    Runs playbooks/provision.yml through ansible-runner: preflight (refuses before it
    changes anything), AMD repositories, amdgpu DKMS, ROCm, render/video groups,
    environment and kernel parameters. A second run changes nothing.

    \b
    Example:
      r9700ctl provision inventory.ini --limit node01 --json run.json
    """
    raise not_built("provision")
