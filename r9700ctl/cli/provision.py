"""`r9700ctl provision`: parse the options, call the provision service, render progress and summary."""

from __future__ import annotations

from pathlib import Path

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.options import group_option, inventory_argument, limit_option, not_empty
from r9700ctl.cli.output import Output, json_option


@click.command()
@inventory_argument
@group_option
@limit_option
@click.option("--check", "-C", is_flag=True, help="Dry run: report what would change, change nothing.")
@click.option("--diff", "-D", is_flag=True, help="Show the changes made to files (with --check: would make).")
@click.option(
    "--tags",
    "-t",
    multiple=True,
    metavar="TAGS",
    callback=not_empty,
    help="Only the roles/tasks with these tags (comma-separated, repeatable), e.g. r9700_node_record.",
)
@click.option(
    "--skip-tags",
    multiple=True,
    metavar="TAGS",
    callback=not_empty,
    help="Skip the roles/tasks with these tags.",
)
@click.option(
    "--extra-vars",
    "-e",
    "extra_vars",
    multiple=True,
    metavar="VARS",
    help="Set variables for this run, as ansible-playbook does: key=value, @file.yml or JSON "
    "(repeatable; later wins). r9700_* names are checked like the inventory's.",
)
@click.option(
    "--forks",
    type=click.IntRange(min=1),
    metavar="N",
    help="Hosts worked on in parallel. [default: number of hosts, at most 50]",
)
@click.option(
    "--ask-become-pass",
    "-K",
    is_flag=True,
    help="Prompt for the sudo password of the remote user. It goes to ansible-playbook's prompt "
    "only: never on a command line, in the environment or in any file.",
)
@click.option(
    "--full",
    is_flag=True,
    help="Run every task, also on a node that is as the last complete provision left it (by default "
    "such a node is verified and left alone: 'converged').",
)
@json_option("the run report", schemas.PROVISION)
@click.option(
    "--verbose",
    "-v",
    count=True,
    help="-v: every task result in the progress and -v to ansible-playbook; -vv: also Ansible's own output.",
)
@click.pass_obj
def provision(
    app: Application,
    inventory: Path,
    group: str,
    limit: str | None,
    check: bool,
    diff: bool,
    tags: tuple[str, ...],
    skip_tags: tuple[str, ...],
    extra_vars: tuple[str, ...],
    forks: int | None,
    ask_become_pass: bool,
    full: bool,
    json_path: str | None,
    verbose: int,
) -> None:
    """Provision the nodes of INVENTORY (an Ansible INI or YAML inventory) into ROCm nodes.

    \b
    First the inventory is checked with Ansible's own parser, before any host is contacted:
    the group exists and has hosts, no two hosts share an address, r9700_expected_gpus is an
    integer >= 1, r9700_rocm_version is 'auto' or a release r9700ctl knows, and no r9700_*
    variable is misspelt. Then playbooks/provision.yml runs through ansible-runner on every
    host of the group at once: preflight (refuses before it changes anything), AMD
    repositories, amdgpu DKMS, ROCm, render/video groups, environment, kernel parameters,
    and a record of the node in /etc/r9700ctl/node.json. A second run changes nothing.
    An unreachable host does not stop the others.

    \b
    A node that is as the last complete provision left it is "converged": the same inputs
    (r9700_* values, r9700ctl, the facts the roles read) and every managed file, package,
    group and unit as that run recorded in /etc/r9700ctl/converged.json. Such a node ends
    right after preflight, with the reason printed ("converged since ..."); anything that
    differs is named and every role runs. --full runs every role regardless.

    \b
    While it runs, one line per host shows its current task and counts. When output is not a
    terminal (or NO_COLOR is set) it is a plain log instead: per host a line for each task that
    changed or failed ("node1: changed Ensure ... (2 of 3 items changed)") and a "still at"
    line while a task runs longer than 30 s.
    At the end, a table per host: status (OK, CHANGED, FAILED, UNREACHABLE), Ansible's
    counts (ok includes changed, as in its PLAY RECAP), duration and the first error.
    Every run keeps Ansible's artifacts (events, stdout) in
    ~/.local/state/r9700ctl/runs/<UTC time>/; the path is printed when anything failed.

    \b
    Examples:
      r9700ctl provision inventory.ini
      r9700ctl provision inventory.ini --limit node01 --check --diff
      r9700ctl provision inventory.ini -e r9700_rocm_version=7.1.1 --json run.json
      r9700ctl provision inventory.ini -K          # sudo asks the remote user for a password

    \b
    Exit codes: 0 every host OK or CHANGED; 1 as 0, but a host needs a reboot
    (named in the summary); 2 some host FAILED; 3 none failed, but some host was
    UNREACHABLE or never ran; 64 bad input (nothing was contacted); 130 interrupted
    with Ctrl-C (the hosts left mid-way are named; running provision again is safe).
    """
    from r9700ctl.provision import ProvisionOptions
    from r9700ctl.provision import provision as run_provision
    from r9700ctl.report import provision as text

    out = Output(app, json_path)  # before anything runs: a long provision must not end in 'cannot write'
    options = ProvisionOptions(
        inventory=inventory,
        group=group,
        limit=limit,
        check=check,
        diff=diff,
        tags=tags,
        skip_tags=skip_tags,
        extra_vars=extra_vars,
        forks=forks,
        verbosity=verbose,
        full=full,
    )

    def ask_password() -> str:
        return click.prompt("BECOME password", hide_input=True, err=True)

    with out.progress(verbose) as progress:
        outcome = run_provision(
            options,
            on_progress=progress,
            ask_become_password=ask_password if ask_become_pass else None,
        )
    out.table(text.summary_table(outcome, plain=out.app.plain, width=out.console.width))
    out.lines(text.closing_lines(outcome))
    if outcome.run.error:
        out.note(f"error: ansible-playbook stopped outside any host: {outcome.run.error}")
    out.finish(outcome.to_dict(), outcome.exit_code)
