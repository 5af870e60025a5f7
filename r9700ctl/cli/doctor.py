"""`r9700ctl doctor`: check the hosts of an inventory, or diagnose a support bundle offline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from r9700ctl.cli.app import Application
from r9700ctl.cli.options import check_json_path, group_option, write_json_output
from r9700ctl.errors import BadInput

if TYPE_CHECKING:
    from r9700ctl.bundle import BundleReport, FleetBundleReport
    from r9700ctl.doctor import DoctorReport, HostReport


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
@click.option(
    "--json",
    "json_path",
    metavar="PATH",
    help="Also write the full report as JSON (schema r9700ctl.doctor/1) to PATH; '-' prints it "
    "instead of the table.",
)
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
    check_json_path(json_path)
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
        _bundle(app, bundle_dir, json_path, verbose)
        return
    if inventory is None:
        raise BadInput(
            what="missing INVENTORY (or --bundle DIR)",
            hint="r9700ctl doctor inventory.ini, or r9700ctl doctor --bundle ./support",
        )
    if not timeout > 0:
        raise BadInput(
            what=f"--timeout must be more than 0 seconds, not {timeout:g}", hint="try --timeout 10"
        )
    _hosts(app, inventory, group, json_path, accept_new_host_keys, timeout, verbose)


# ---------------------------------------------------------------- hosts


def _hosts(
    app: Application,
    inventory: str,
    group: str,
    json_path: str | None,
    accept_new_host_keys: bool,
    timeout: float,
    verbose: bool,
) -> None:
    from r9700ctl.doctor import doctor_inventory

    err = app.console(stderr=True)

    def host_done(host: HostReport) -> None:
        err.print(
            f"{host.name}: {host.status} ({len(host.checks)} checks, {host.duration_s:.1f} s)", markup=False
        )

    report = doctor_inventory(
        inventory,
        group,
        accept_new_host_keys=accept_new_host_keys,
        timeout=timeout,
        host_done=host_done,
    )
    document = report.to_dict()
    write_json_output(json_path, document)
    if json_path != "-":
        _render_hosts(app, report, verbose)
    click.get_current_context().exit(report.exit_code)


def _render_hosts(app: Application, report: DoctorReport, verbose: bool) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    console = app.console()
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("host", "check", "status", "code"):  # code: the reason code (r9700ctl explain CODE)
        table.add_column(column, no_wrap=True)
    table.add_column("detail", overflow="fold", ratio=3)
    table.add_column("fix", overflow="fold", ratio=2)
    for host in report.hosts:
        shown = [c for c in host.checks if verbose or c.status not in ("PASS", "SKIP")]
        if not shown:  # the summary row says what ran: skips alone pass nothing
            passed = sum(1 for c in host.checks if c.status == "PASS")
            skipped = len(host.checks) - passed
            table.add_row(
                host.name,
                "all",
                host.status,
                "",
                f"{passed} checks passed" + (f", {skipped} skipped" if skipped else ""),
                "",
            )
        for check in shown:
            # Text(): details quote tool output, whose "[...]" must not be read as markup
            table.add_row(host.name, check.id, check.status, check.code, Text(check.detail), Text(check.hint))
    from r9700ctl.report import print_plain

    print_plain(console, table) if app.plain else console.print(table)
    for line in _known_issue_lines(report):
        console.print(line, markup=False, highlight=False)
    console.print(_hosts_summary(report), markup=False)


def _known_issue_lines(report: DoctorReport) -> list[str]:
    """Per host, the known issues of its GPUs with the release it has or would get, and the workaround."""
    lines = []
    for host in report.hosts:
        for item in host.resolved.get("known_issues") or []:
            release = host.resolved.get("rocm_version") or "?"
            lines.append(
                f"{host.name}: known issue {item['id']} (ROCm {release}): {item['title']}; "
                f"workaround {item['workaround']} ({item['in_force']}); {item['source']}"
            )
    return lines


def _hosts_summary(report: DoctorReport) -> str:
    unreached = [h.name for h in report.hosts if not h.reached]
    failed = [h.name for h in report.hosts if h.reached and h.status in ("FAIL", "ERROR", "INCONCLUSIVE")]
    ready = [h for h in report.hosts if h.reached and h.name not in failed]
    warned = sum(1 for h in ready if h.status == "WARN")
    parts = [
        f"{len(report.hosts)} host(s): {len(ready)} ready" + (f" ({warned} with warnings)" if warned else "")
    ]
    if failed:
        parts.append(f"{len(failed)} failed a check ({', '.join(failed)})")
    if unreached:
        parts.append(f"{len(unreached)} could not be reached or logged in to ({', '.join(unreached)})")
    return "; ".join(parts) + f"; exit {report.exit_code}"


# ---------------------------------------------------------------- bundle


def _bundle(app: Application, bundle_dir: str, json_path: str | None, verbose: bool) -> None:
    from r9700ctl.bundle import diagnose_path

    report = diagnose_path(Path(bundle_dir))
    write_json_output(json_path, report.to_dict())
    if json_path != "-":
        _render_bundles(app, report, verbose)
    click.get_current_context().exit(report.exit_code)


def _render_bundles(app: Application, fleet: FleetBundleReport, verbose: bool) -> None:
    console = app.console()
    for index, bundle in enumerate(fleet.bundles):
        if index:
            console.print()
        for line in _bundle_lines(bundle, verbose):
            # markup=False: findings quote tool output, whose "[gfxhub]" must print as it is
            console.print(line, markup=False, highlight=False)
    if len(fleet.bundles) > 1:
        console.print()
        console.print(fleet.summary(), markup=False)


def _bundle_lines(bundle: BundleReport, verbose: bool) -> list[str]:
    from r9700ctl.bundle import lines as evidence_of
    from r9700ctl.bundle import severity

    lines = [f"bundle {bundle.path} (node {bundle.node})"]
    lines += [f"  {line}" for line in bundle.overview_lines()]
    shown = [f for f in bundle.findings if verbose or severity(f) != "INFO"]
    hidden = len(bundle.findings) - len(shown)
    if not bundle.findings:
        lines.append("  no problems found in the files present")
    for finding in shown:
        lines.append(f"  {severity(finding):<5} {finding.detail}")
        evidence = evidence_of(finding)
        for line in evidence[:3]:
            lines.append(f"        evidence: {line.location()}" + (f": {line.text}" if line.text else ""))
        if len(evidence) > 3:
            lines.append(f"        evidence: {len(evidence) - 3} more line(s) in --json")
        if finding.hint:
            lines.append(f"        fix: {finding.hint}")
        if finding.code:
            lines.append(f"        code: {finding.code}")
    if hidden:
        lines.append(f"  {hidden} note(s) not shown (--verbose shows them)")
    lines += [f"  {item.detail}" for item in bundle.not_judged]
    lines.append(f"  {bundle.summary()}")
    return lines
