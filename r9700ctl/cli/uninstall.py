"""`r9700ctl uninstall`: remove what provision added, keep what was there before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.options import (
    check_json_path,
    group_option,
    inventory_argument,
    limit_option,
    write_json_output,
)


@click.command()
@inventory_argument
@group_option
@limit_option
@click.option("--check", "-C", is_flag=True, help="Show what would be removed and put back; change nothing.")
@click.option(
    "--json", "json_path", metavar="PATH", help="Also write each node's result as JSON ('-': stdout)."
)
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
    from r9700ctl import inventory as inventory_module
    from r9700ctl import paths, runner
    from r9700ctl.provision import exit_code_for

    check_json_path(json_path)
    checked = inventory_module.load_inventory(inventory, group=group, limit=limit)
    console = app.console(stderr=json_path == "-")

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    result = runner.run_playbook(
        runner.RunRequest(
            playbook=paths.playbook("uninstall.yml"),
            inventory=checked.path,
            limit=limit,
            check=check,
            forks=max(1, min(len(checked.hosts), 50)),
            extra_vars={"r9700_group": group},
        )
    )
    hosts = [result.hosts.get(name) or runner.HostResult(host=name) for name in checked.host_names]
    nodes: list[dict[str, Any]] = []
    for host in hosts:
        done = host.lifecycle
        nodes.append({"host": host.host, "status": host.status, "error": host.first_error, "result": done})
        if host.status in (runner.OK, runner.CHANGED):
            say(f"{host.host}: {_describe(done, check)}")
        else:
            say(f"{host.host}: {host.status}: {host.first_error or 'did not run'}")
        if host.reboot_pending:
            say(f"reboot required: {host.host} ({'; '.join(host.reboot_reasons)})")
    code = exit_code_for(result, hosts)
    write_json_output(
        json_path, {"schema": schemas.UNINSTALL, "check": check, "exit_code": code, "nodes": nodes}
    )
    click.get_current_context().exit(code)


def _describe(done: dict[str, Any], check: bool) -> str:
    if not done.get("changed"):
        return "nothing of r9700ctl's left to remove"
    verb = "would remove" if check else "removed"
    parts = [
        f"{len(done.get('remove', [])) + len(done.get('rmtree', []))} file(s)/directories",
        f"{len(done.get('purge', []))} package(s) ({', '.join(done.get('purge', [])[:6])})",
    ]
    restored = done.get("restore", [])
    text = f"{verb} {', '.join(parts)}"
    if restored:
        text += f"; {'would put' if check else 'put'} back as before provision: {', '.join(restored)}"
    if not done.get("complete", True):
        text += "; provisioned before r9700ctl recorded what was there first: managed files kept"
    return text
