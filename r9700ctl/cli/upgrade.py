"""`r9700ctl upgrade` and `r9700ctl rollback`: batches with validation gates over the provisioning roles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from r9700ctl.agent import schemas
from r9700ctl.agent.levels import LEVEL_NAMES
from r9700ctl.cli.app import Application
from r9700ctl.cli.options import group_option, inventory_argument, limit_option
from r9700ctl.cli.output import Output, json_option

GATE_LEVELS = LEVEL_NAMES


def batch_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options upgrade and rollback share (the same batches, gates and hooks)."""
    for decorator in reversed(
        [
            inventory_argument,
            group_option,
            limit_option,
            click.option(
                "--serial",
                metavar="N|P%",
                help="Nodes per batch: a count (2) or a share of the hosts (25%). [default: 1]",
            ),
            click.option(
                "--max-fail-percent",
                type=float,
                metavar="P",
                help="Go on to the next batch while at most P% of all nodes failed. [default: 0, the "
                "first failed node stops the rollout]",
            ),
            click.option(
                "--check",
                "-C",
                is_flag=True,
                help="Show the plan per node (from, to, reboot) and change nothing.",
            ),
            click.option(
                "--force",
                is_flag=True,
                help="Also stop processes holding /dev/kfd that r9700ctl did not start (without it such a "
                "process refuses its node, named with its PID).",
            ),
            click.option(
                "--gate-level",
                type=click.Choice(GATE_LEVELS),
                default="quick",
                show_default=True,
                help="Validation level a moved node must pass (PASS or WARN) before it is returned; "
                "config checks files and versions only (nodes without a GPU, such as the lab's).",
            ),
            click.option(
                "--gate-rule",
                type=click.Choice(("pass", "no-worse")),
                default="pass",
                show_default=True,
                help="pass: a node returns only when its validation is PASS or WARN. no-worse: also when it "
                "is no worse than before the move (validated then too; same status, no check newly failing), "
                "for nodes that did not pass before.",
            ),
            click.option(
                "--drain-cmd",
                metavar="CMD",
                help="Run on this machine before a node is moved; {node} is its name, e.g. "
                "'scontrol update nodename={node} state=drain reason=upgrade'. A failure fails the node.",
            ),
            click.option(
                "--resume-cmd",
                metavar="CMD",
                help="Run on this machine after a node passed validation, e.g. "
                "'scontrol update nodename={node} state=resume'.",
            ),
            json_option("the plan and the outcome per node", schemas.LIFECYCLE),
        ]
    ):
        command = decorator(command)
    return command


@click.command()
@batch_options
@click.option(
    "--rocm",
    default="auto",
    show_default=True,
    metavar="VERSION|auto",
    help="Release to move to: one r9700ctl's manifest lists (an unknown one is refused with the list) or "
    "auto, the newest that suits each node. The driver, repositories, pin and image tag move with it.",
)
@click.option(
    "--allow-downgrade", is_flag=True, help="Allow --rocm to name an older release than a node runs."
)
@click.pass_obj
def upgrade(app: Application, rocm: str, allow_downgrade: bool, **options: Any) -> None:
    """Move the nodes of INVENTORY to another ROCm release, a batch at a time.

    \b
    Per batch and node: the drain hook (--drain-cmd); stop what holds /dev/kfd (the
    monitoring timer, containers started by r9700-run; anything else refuses the node
    unless --force); amdgpu-dkms and ROCm to the manifest's pair for the release, with its
    repositories, pin and image tag; a reboot where the driver changed (only where the node
    can reboot: systemd runs it, r9700_reboot is true); then validation at --gate-level.
    A node is returned (resume hook, monitoring timer) only when validation passes. When a
    batch fails the rollout stops: the summary names the nodes upgraded, failed (and why)
    and untouched. Each node keeps the state it left in /etc/r9700ctl/state.prev.json, so
    `r9700ctl rollback` can return it. A second upgrade of an upgraded node changes nothing.

    \b
    Examples:
      r9700ctl upgrade inventory.ini --rocm 7.1.1 --check
      r9700ctl upgrade inventory.ini --rocm auto --serial 25% --max-fail-percent 10
      r9700ctl upgrade inventory.ini --rocm 7.2.3 \\
          --drain-cmd 'scontrol update nodename={node} state=drain reason=upgrade' \\
          --resume-cmd 'scontrol update nodename={node} state=resume'

    \b
    Exit codes: 0 every node moved and validated (or already there); 1 as 0, but a node
    needs a reboot it could not do itself; 2 a node failed and the rollout stopped; 3 a
    node did not answer; 64 bad input (nothing was changed).
    """
    _run(app, "upgrade", rocm=rocm, allow_downgrade=allow_downgrade, **options)


@click.command()
@batch_options
@click.pass_obj
def rollback(app: Application, **options: Any) -> None:
    """Return the nodes of INVENTORY to the state before their last change, a batch at a time.

    \b
    Each node goes back to the release its /etc/r9700ctl/state.prev.json names (written when
    an upgrade or a provision changed it), with the same batches, drain/resume hooks, reboot
    and validation gate as `r9700ctl upgrade`. A node without state.prev.json refuses the
    rollback before anything changes. Rolling back twice returns to the newer release.

    \b
    Examples:
      r9700ctl rollback inventory.ini --check
      r9700ctl rollback inventory.ini --serial 1 --gate-level quick

    \b
    Exit codes: as r9700ctl upgrade.
    """
    _run(app, "rollback", **options)


@click.command("kernel-upgrade")
@batch_options
@click.pass_obj
def kernel_upgrade(app: Application, **options: Any) -> None:
    """Move the nodes of INVENTORY to the newest kernel of their line, keeping the driver.

    
    Per batch and node: the drain hook; stop what holds /dev/kfd; release the kernel hold
    (r9700_kernel_hold); install the newest kernel of the line the node follows (its meta
    package: linux-image-generic, -generic-hwe-24.04, -aws, -amd64, ...) together with the
    matching headers meta package; build amdgpu for the new kernel with DKMS and check
    `dkms status` for it BEFORE any reboot. A new kernel without an amdgpu module is never
    booted: the node fails with the DKMS error, the new kernel's packages are removed again
    and the line's meta packages step back, so the next boot is still the running kernel.
    Otherwise the new kernel is held again and the node reboots into it (where it can),
    then it is validated at --gate-level and returned. --check asks apt what it would
    install (apt-get -s, with the package lists each node has) and shows per node the
    running kernel, the one it would move to and whether it reboots; nothing changes.

    
    Examples:
      r9700ctl kernel-upgrade inventory.ini --check
      r9700ctl kernel-upgrade inventory.ini --serial 1
      r9700ctl kernel-upgrade inventory.ini --serial 25% --gate-level quick

    
    Exit codes: as r9700ctl upgrade.
    """
    _run(app, "kernel-upgrade", **options)


def _run(app: Application, mode: str, **given: Any) -> None:
    from r9700ctl.lifecycle.service import LifecycleOptions, run
    from r9700ctl.report.lifecycle import plan_lines, summary_lines

    out = Output(app, given.pop("json_path", None))
    outcome = run(LifecycleOptions(mode=mode, **given), progress=out.line)
    out.lines(plan_lines(outcome) + summary_lines(outcome))
    out.finish(outcome.to_dict(), outcome.exit_code)
