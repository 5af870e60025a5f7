"""`r9700ctl collect`: gather each node's support bundle into a directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from r9700ctl.cli.app import Application
from r9700ctl.cli.options import check_json_path, group_option, inventory_argument, limit_option

if TYPE_CHECKING:
    from rich.table import Table

    from r9700ctl.collect import CollectReport


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
@click.option(
    "--json",
    "json_path",
    metavar="PATH",
    help="Also write what was collected as JSON (schema r9700ctl.collect/1) to PATH; '-' prints it "
    "instead of the table.",
)
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
    from r9700ctl.agent.atomic import write_json
    from r9700ctl.collect import collect_inventory
    from r9700ctl.report import print_plain
    from r9700ctl.report.progress import renderer as progress_renderer

    json_to_stdout = json_path == "-"
    check_json_path(json_path)  # before any host is contacted
    console = app.console(stderr=json_to_stdout)
    renderer = progress_renderer(console, plain=app.plain or json_to_stdout, verbosity=verbose)
    with renderer:
        report = collect_inventory(inventory, group, out_dir, limit=limit, progress=renderer)

    document = report.to_dict()
    if json_to_stdout:
        click.echo(json.dumps(document, indent=2))
    else:
        table = _summary_table(report)
        print_plain(console, table) if app.plain else console.print(table)
        if json_path:
            write_json(json_path, document)
        console.print(_closing_line(report), markup=False, highlight=False, soft_wrap=True)
    click.get_current_context().exit(report.exit_code)


def _summary_table(report: CollectReport) -> Table:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("host", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("files", justify="right", no_wrap=True)
    table.add_column("not recorded", overflow="fold", ratio=1)
    for host in report.hosts:
        if host.status == "COLLECTED":
            missing = ", ".join(sorted(host.missing)) or "-"
        else:
            missing = host.error or host.status.lower()
        table.add_row(host.host, host.status, str(len(host.files)), Text(missing))
    return table


def _closing_line(report: CollectReport) -> str:
    out = report.out_dir
    if not any(host.files for host in report.hosts):
        # Nothing recorded anywhere: doctor --bundle would only say so again, host by host.
        return (
            f"no file recorded on any host (MISSING.txt in {out}/<host>/ says why); "
            "`r9700ctl doctor INVENTORY` checks reachability and sudo"
        )
    return (
        f"bundles in {out}/<host>/ (MISSING.txt says why a file is missing); "
        f"next: r9700ctl doctor --bundle {out}"
    )
