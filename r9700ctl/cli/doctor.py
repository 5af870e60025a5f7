"""`r9700ctl doctor`: check the hosts of an inventory, or diagnose a support bundle offline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.options import group_option
from r9700ctl.cli.output import Output, json_option
from r9700ctl.errors import BadInput

if TYPE_CHECKING:
    from r9700ctl.doctor import HostReport


@click.command()
@click.argument("inventory", required=False, metavar="[INVENTORY]")
@click.option(
    "--bundle",
    "bundle_dir",
    metavar="DIR",
    help="Diagnose a support bundle offline instead of contacting hosts: one node's bundle "
    "directory, or a directory of them as `r9700ctl collect --out DIR` writes.",
)
@group_option
@json_option("the full report", schemas.DOCTOR, replaces_text=True)
@click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Record the host key of a host seen for the first time in the known_hosts file (an "
    "explicit trust decision). A CHANGED host key is still refused.",
)
@click.option(
    "--timeout",
    type=float,
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds to wait for each host to answer (connect, SSH handshake, login).",
)
@click.option("--verbose", "-v", is_flag=True, help="List passed checks too, not only problems.")
@click.pass_obj
def doctor(
    app: Application,
    inventory: str | None,
    bundle_dir: str | None,
    group: str,
    json_path: str | None,
    accept_new_host_keys: bool,
    timeout: float,
    verbose: bool,
) -> None:
    """Check that r9700ctl can reach and work on the hosts of INVENTORY, and what would stop a
    provision; or, with --bundle, diagnose a node's recorded tool outputs offline.

    \b
    On each host, in parallel: the name resolves; the SSH port answers; the host key
    matches known_hosts (~/.ssh/known_hosts and the UserKnownHostsFile of the ssh config
    given with ansible_ssh_common_args='-F FILE'); login works (it names the keys tried);
    the login shell runs commands; sudo works without a password; python3 is there; then
    the same preflight checks the r9700_preflight role runs (OS, kernel headers, GPUs,
    ROCm release, Secure Boot, disk, apt locks). Nothing on the hosts is changed but
    apt's package lists, refreshed as the role does (r9700_preflight_apt_update: false
    in the inventory turns that off).

    \b
    With --bundle DIR it reads the files `r9700ctl collect` records (rocminfo.txt,
    amd-smi-*.json, lspci.txt, dkms-status.txt, dmesg.txt, env.txt, id.txt ...) and
    reports the GPUs, driver and ROCm versions, and findings with evidence (file:line)
    and the fix; it says what it could not judge because a file is missing. For RCCL's
    start-up warnings, save a job's output (run with NCCL_DEBUG=WARN) as rccl.log in
    the node's bundle directory.

    \b
    Both modes list the known issues of each node's GPUs and release (`r9700ctl
    known-issues`) with the source and the workaround; a bundle whose environment
    re-creates one (HSA_ENABLE_IPC_MODE_LEGACY=1 in env.txt) or shows its signs is a
    finding. amdgpu's kernel-log trouble (ring timeouts, MES failures, page faults with
    or without PCIe AER, resets and failed resets, a card lost from the bus) is counted
    per GPU and explained.

    \b
    Examples:
      r9700ctl doctor inventory.ini
      r9700ctl doctor inventory.ini --accept-new-host-keys --json doctor.json
      r9700ctl doctor --bundle ./support            # every node collected there
      r9700ctl doctor --bundle ./support/node01 --json -

    \b
    Exit codes: 0 all good; 1 warnings only; 2 a check failed (or, with --bundle,
    a finding is FAIL); 3 a host could not be reached or logged in to (even when
    another failed a check: its state is unknown); 4 with --bundle, no FAIL found
    but a bundle lists no GPU or its files answer no more checks than they leave
    open (INCONCLUSIVE, never PASS); 64 bad input, nothing contacted.
    """
    out = Output(app, json_path, replaces_text=True)
    if bundle_dir is not None:
        if inventory is not None:
            raise BadInput(
                what=f"give either INVENTORY ({inventory}) or --bundle DIR, not both",
                hint="--bundle reads recorded outputs offline; INVENTORY checks live hosts",
            )
        if accept_new_host_keys:
            raise BadInput(
                what="--accept-new-host-keys has no meaning with --bundle",
                hint="--bundle contacts no host; drop the option",
            )
        _bundle(out, bundle_dir, verbose)
    if inventory is None:
        raise BadInput(
            what="missing INVENTORY (or --bundle DIR)",
            hint="r9700ctl doctor inventory.ini, or r9700ctl doctor --bundle ./support",
        )
    if not timeout > 0:
        raise BadInput(
            what=f"--timeout must be more than 0 seconds, not {timeout:g}", hint="try --timeout 10"
        )
    _hosts(out, inventory, group, accept_new_host_keys, timeout, verbose)


def _hosts(
    out: Output, inventory: str, group: str, accept_new_host_keys: bool, timeout: float, verbose: bool
) -> None:
    from r9700ctl.doctor import doctor_inventory
    from r9700ctl.report import doctor as text

    def host_done(host: HostReport) -> None:
        out.note(f"{host.name}: {host.status} ({len(host.checks)} checks, {host.duration_s:.1f} s)")

    report = doctor_inventory(
        inventory,
        group,
        accept_new_host_keys=accept_new_host_keys,
        timeout=timeout,
        host_done=host_done,
    )
    out.table(text.hosts_table(report, verbose))
    out.lines(text.known_issue_lines(report))
    out.line(text.hosts_summary(report))
    out.finish(report.to_dict(), report.exit_code)


def _bundle(out: Output, bundle_dir: str, verbose: bool) -> None:
    from r9700ctl.bundle import diagnose_path
    from r9700ctl.report import doctor as text

    report = diagnose_path(Path(bundle_dir))
    out.lines(text.bundles_lines(report, verbose))
    out.finish(report.to_dict(), report.exit_code)
