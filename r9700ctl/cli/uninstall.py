"""`r9700ctl uninstall`: remove what provision added, keep what was there before."""

from __future__ import annotations

from pathlib import Path

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.options import group_option, inventory_argument, limit_option
from r9700ctl.cli.output import Output, json_option


@click.command()
@inventory_argument
@group_option
@limit_option
@click.option("--check", "-C", is_flag=True, help="Show what would be removed and put back; change nothing.")
@json_option("each node's result", schemas.UNINSTALL)
@click.pass_obj
def uninstall(
    app: Application, inventory: Path, group: str, limit: str | None, check: bool, json_path: str | None
) -> None:
    """Remove from the nodes of INVENTORY what `r9700ctl provision` added.

    \b
    Packages provision installed (amdgpu-dkms, ROCm through rocm-core, the kernel headers it
    added, node_exporter) and the dependencies apt pulled in for them, AMD's repositories,
    pin and keyring, udev rules, environment files and drop-ins, the GRUB drop-in, the
    power and monitoring units, group memberships it added, and r9700ctl's own directories.
    Never what was there before the first provision: /etc/r9700ctl/before.json, written
    then, says what was, and a file that existed (adduser.conf, say) is put back byte for
    byte. A node without that record is refused. Provision after uninstall gives the same
    managed files, byte for byte, as the first provision. Where the driver or the kernel
    command line changes, the node reports "reboot required".

    \b
    Examples:
      r9700ctl uninstall inventory.ini --check
      r9700ctl uninstall inventory.ini --limit node3

    \b
    Exit codes: 0 done; 1 done, a node needs a reboot; 2 a node failed (or has no record);
    3 a node did not answer; 64 bad input.
    """
    from r9700ctl.report.uninstall import node_lines
    from r9700ctl.uninstall import uninstall as run_uninstall

    out = Output(app, json_path)
    outcome = run_uninstall(inventory, group, limit=limit, check=check)
    out.lines(node_lines(outcome))
    out.finish(outcome.to_dict(), outcome.exit_code)
