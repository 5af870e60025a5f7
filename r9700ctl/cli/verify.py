"""`r9700ctl verify`: run the shipped testinfra suite against the nodes and say which host fails what."""

from __future__ import annotations

from pathlib import Path

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.options import group_option, inventory_argument, limit_option
from r9700ctl.cli.output import Output, check_output_path, file_option, json_option


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
@json_option("the results", schemas.VERIFY)
@file_option("--junit", "junit_xml", help="Also write JUnit XML for CI (as validate --junit does).")
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
    from r9700ctl.report.verify import render_lines
    from r9700ctl.verify import VerifyRequest
    from r9700ctl.verify import verify as run_verify

    out = Output(app, json_path)
    if junit_xml is not None:
        check_output_path("--junit", junit_xml)
    request = VerifyRequest(
        inventory=inventory,
        group=group,
        limit=limit,
        keyword=keyword,
        junit_xml=junit_xml,
        timeout_s=timeout_s,
    )
    result = run_verify(request, progress=out.line)
    out.lines(render_lines(result))
    out.finish(result.to_dict(), result.exit_code)
