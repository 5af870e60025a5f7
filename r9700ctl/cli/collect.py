"""`r9700ctl collect`: gather each node's support bundle into a directory."""

from __future__ import annotations

from pathlib import Path

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.options import group_option, inventory_argument, limit_option
from r9700ctl.cli.output import Output, json_option


@click.command()
@inventory_argument
@click.option(
    "--out",
    "-o",
    "out_dir",
    required=True,
    metavar="DIR",
    type=click.Path(path_type=Path),
    help="Directory for the bundles: one subdirectory per host (created when missing).",
)
@group_option
@limit_option
@json_option("what was collected", schemas.COLLECT)
@click.option(
    "--verbose", "-v", count=True, help="Every task result in the progress (-vv: Ansible's output)."
)
@click.pass_obj
def collect(
    app: Application,
    inventory: Path,
    out_dir: Path,
    group: str,
    limit: str | None,
    json_path: str | None,
    verbose: int,
) -> None:
    """Gather each node's support bundle (its tools' outputs) into DIR/<host>/.

    \b
    Runs playbooks/collect.yml through Ansible on every host of the group at once and
    fetches, per node: os-release, uname.txt, cmdline.txt, lspci.txt (lspci -vvv -nn),
    lsmod.txt, dkms-status.txt, rocminfo.txt, amd-smi-{static,metric,list,topology}.json,
    amd-smi.txt, rocm-smi.json, rocm-smi-topo.txt, nvidia-smi.xml, dmesg.txt, id.txt and
    env.txt (the login user's view; env.txt keeps only GPU-related variables, so no
    secret ends up in a bundle). A tool that is absent or fails never stops the run:
    DIR/<host>/MISSING.txt says what could not be recorded and why, collect.json has
    every command with its exit status. Files of an earlier collect are replaced.
    Nothing on the nodes is changed (a scratch directory is removed again).

    \b
    Then diagnose offline, here or wherever the bundles are sent:
      r9700ctl doctor --bundle DIR

    \b
    Examples:
      r9700ctl collect inventory.ini --out ./support
      r9700ctl collect inventory.ini --out ./support --limit node03 --json collect.json

    \b
    Exit codes: 0 every host's bundle collected (missing tools are listed, not
    failures); 2 collecting failed on a host; 3 a host could not be reached;
    64 bad input (nothing was contacted).
    """
    from r9700ctl.collect import collect_inventory
    from r9700ctl.report import collect as text

    out = Output(app, json_path)  # before any host is contacted
    with out.progress(verbose) as progress:
        report = collect_inventory(inventory, group, out_dir, limit=limit, progress=progress)
    out.table(text.summary_table(report))
    out.line(text.closing_line(report))
    out.finish(report.to_dict(), report.exit_code)
