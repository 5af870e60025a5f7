"""`r9700ctl verify`: run the shipped testinfra suite against the nodes and say which host fails what."""

from __future__ import annotations

from pathlib import Path

import click

from r9700ctl.cli.app import Application
from r9700ctl.cli.options import group_option, inventory_argument, limit_option


@click.command()
@inventory_argument
@group_option
@limit_option
@click.option(
    "-k",
    "keyword",
    metavar="EXPR",
    help="Only the tests matching this pytest -k expression, e.g. 'repositories'.",
)
@click.option(
    "--json",
    "json_path",
    metavar="PATH",
    help="Also write the results as JSON (schema r9700ctl.verify/1); '-' for standard output "
    "(the lines then go to standard error).",
)
@click.option(
    "--junit",
    "junit_xml",
    metavar="PATH",
    type=click.Path(path_type=Path),
    help="Also write JUnit XML for CI (as validate --junit does).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=1800,
    show_default=True,
    help="Seconds for the whole suite.",
)
@click.pass_obj
def verify(
    app: Application,
    inventory: Path,
    group: str,
    limit: str | None,
    keyword: str | None,
    json_path: str | None,
    junit_xml: Path | None,
    timeout_s: float,
) -> None:
    """Check that the nodes of INVENTORY carry everything `r9700ctl provision` promised.

    \b
    Runs the testinfra suite shipped with r9700ctl (tests/infra) over SSH the way Ansible
    connects (ansible_host, ansible_user, the key and ssh_common_args of the inventory;
    become needs passwordless sudo): AMD's repositories (deb822 sources for the resolved
    release, keyring fingerprint, pin), amdgpu-dkms and ROCm at the pinned repositories'
    versions (apt-cache policy), render/video membership and adduser defaults, udev rules
    for /dev/kfd and /dev/dri/renderD*, the environment files, the GRUB drop-in, a pending
    reboot, /etc/r9700ctl/state.json and node.json. Expectations come from each node's
    state.json, the inventory's r9700_* variables and the roles' defaults.

    \b
    Prints a line per host (passed, failed, skipped, errors), then one line per failed
    check: host, test, what was wrong. The same suite runs without r9700ctl:
      pytest <suite> --hosts='ansible://r9700_nodes' --ansible-inventory=inventory.ini

    \b
    Examples:
      r9700ctl verify inventory.ini
      r9700ctl verify inventory.ini --limit node01 -k 'repositories or packages'
      r9700ctl verify inventory.ini --junit verify.xml --json verify.json

    \b
    Exit codes: 0 every host passed checks (skips beside them are fine); 2 some check failed;
    3 none failed but some host could not be checked (unreachable, no sudo) or no check ran
    on it (all skipped, -k matched nothing): NOT_CHECKED, never PASS; 64 bad input (nothing
    was contacted).
    """
    from r9700ctl.cli.options import check_output_path, write_json_output
    from r9700ctl.verify import VerifyRequest
    from r9700ctl.verify import verify as run_verify

    json_file = Path(json_path) if json_path and json_path != "-" else None
    for option, path in (("--json", json_file), ("--junit", junit_xml)):
        if path is not None:
            check_output_path(option, path)
    request = VerifyRequest(
        inventory=inventory,
        group=group,
        limit=limit,
        keyword=keyword,
        junit_xml=junit_xml,
        timeout_s=timeout_s,
    )
    console = app.console(stderr=json_path == "-")

    def progress(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    result = run_verify(request, progress=progress)
    for line in render_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    write_json_output(json_path, result.to_dict())
    click.get_current_context().exit(result.exit_code)


def render_lines(result) -> list[str]:
    """The host table, one line per problem, and a closing sentence."""
    width = max([4, *(len(h.host) for h in result.hosts)])
    status_width = max([6, *(len(h.status) for h in result.hosts)])
    lines = [f"{'HOST':<{width}}  {'STATUS':<{status_width}}  PASSED  FAILED  SKIPPED  ERRORS"]
    for h in result.hosts:
        lines.append(
            f"{h.host:<{width}}  {h.status:<{status_width}}  {h.passed:>6}  {h.failed:>6}  {h.skipped:>7}  "
            f"{h.errors:>6}"
        )
    problems = result.problems()
    if problems:
        lines.append("")
        for o in problems:
            kind = "could not check" if o.status == "error" else "FAILED"
            first = o.message.strip().splitlines()[0] if o.message.strip() else "no message"
            lines.append(f"{o.host:<{width}}  {kind} {o.label} ({o.file}): {first}")
    failed = sum(1 for h in result.hosts if h.status == "FAIL")
    passed = sum(1 for h in result.hosts if h.status == "PASS")
    unchecked = len(result.hosts) - failed - passed
    for h in result.hosts:
        if h.status == "UNREACHABLE":
            lines.append(
                f"{h.host:<{width}}  could not be reached over SSH: {h.reason} "
                "(`r9700ctl doctor INVENTORY` names the cause and the fix)"
            )
        if h.status == "NOT_CHECKED":
            lines.append(f"{h.host:<{width}}  not checked: no check ran on it ({h.skipped} skipped)")
    lines.append(
        f"{len(result.hosts)} host(s) checked in {result.duration_s:.1f} s: "
        f"{passed} passed, {failed} failed, {unchecked} could not be checked"
    )
    if result.junit_xml:
        lines.append(f"JUnit XML: {result.junit_xml}")
    return lines
