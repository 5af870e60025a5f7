"""`r9700ctl lab up|status|dockerd|down`: throwaway test nodes on this machine."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.output import Output, json_option

# Same limits as r9700ctl.lab (a unit test keeps them equal); repeated so --help imports no lab code.
MAX_NODES = 200
MAX_GPUS = 16
# r9700ctl.lab.machine.FAULTS: the name, then the check result that must flag it (a unit test
# keeps both lists equal).
FAULTS = {
    "card-missing": "the last card is gone from the bus -> inventory.count FAIL",
    "link-gen4-x8": "card 0 trained at Gen4 x8 of Gen5 x16 -> pcie.link (noted at idle, FAIL under load)",
    "small-bar": "256 MiB BARs (no Resizable BAR) -> platform.bar FAIL",
    "iommu-translated": "IOMMU translating DMA, no iommu=pt -> platform.iommu WARN",
    "acs-redirect": "cards 0 and 1 behind a switch with ACS redirect -> platform.acs WARN",
    "gfx942-override": "HSA_OVERRIDE_GFX_VERSION=9.4.2 in /etc/environment -> driver.hsa_override FAIL",
}
# r9700ctl.lab.netfaults.NET_FAULTS (need --cluster-network): the name, then the phase of
# `validate --cluster` and the reason code that must name it (a unit test keeps both equal).
NET_FAULTS = {
    "slow-link": "the node's cluster link at 50 of 500 Mbit/s -> network CLUSTER_BANDWIDTH_LOW",
    "mtu-mismatch": "the node's cluster NIC at MTU 9000, the rest 1500 -> facts CLUSTER_MTU_MISMATCH",
    "firewall-drop": "nftables drops TCP but the rendezvous port -> network CLUSTER_PORTS_BLOCKED",
    "hostname-loopback": "the host name maps to 127.0.1.1 -> facts CLUSTER_HOSTNAME_LOOPBACK",
    "decoy-route": "peers routed via a Docker-style bridge -> facts CLUSTER_ROUTE_NOT_CLUSTER_IF",
    "link-drop": "nodeN<->nodeN+1 dropped, both fine with others -> network CLUSTER_LINK_BLAMED",
}


def _faults(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """--fault [NODE=]NAME ...: without NODE the first fault goes to node1, the next to node2, ..."""
    planted: dict[str, str] = {}
    for position, value in enumerate(values, start=1):
        node, _, name = value.rpartition("=")
        node = node or f"node{position}"
        if name not in FAULTS and name not in NET_FAULTS:
            known = ", ".join([*FAULTS, *NET_FAULTS])
            raise click.BadParameter(f"no fault '{name}'; faults: {known}", param=param)
        if node in planted:
            raise click.BadParameter(f"{node} already gets {planted[node]}: one fault per node", param=param)
        planted[node] = name
    return planted


dir_option = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("lab"),
    show_default=True,
    envvar="R9700CTL_LAB_DIR",
    help="Lab directory: state, inventory.ini, ssh_config, keys. [env var: R9700CTL_LAB_DIR]",
)


def _progress(out: Output) -> Callable[[str], None]:
    """Each step of `up` or `down` as a line, with the seconds since the command started."""
    from r9700ctl.report.lab import progress_line

    started = time.monotonic()
    return lambda message: out.line(progress_line(time.monotonic() - started, message))


@click.group()
def lab() -> None:
    """Throwaway Debian 12 test nodes on this machine: a TEST and DEMO environment, never production.

    \b
    Each node is a debootstrap root file system (cached, so the second `up` takes seconds) with its
    own network namespace and address, sshd as its PID 1, a user `r9700` with passwordless sudo.
    On the host side: a package mirror with STAND-INS for AMD's repositories (their tools print
    outputs recorded on real R9700 nodes) and an apt proxy to Debian. Needs root.

    \b
    Example:
      sudo r9700ctl lab up --nodes 2
      r9700ctl provision lab/inventory.ini
      ssh -F lab/ssh_config node1
      sudo r9700ctl lab down
    """


@lab.command(
    epilog="\b\nFAULTS (the one check of `r9700ctl validate` that reports each):\n"
    + "\n".join(f"  {name:<17} {what}" for name, what in FAULTS.items())
    + "\n\n\b\nNETWORK FAULTS (need --cluster-network; the phase of `validate --cluster` that finds each):\n"
    + "\n".join(f"  {name:<17} {what}" for name, what in NET_FAULTS.items())
)
@click.option(
    "--nodes",
    type=click.IntRange(1, MAX_NODES),
    default=2,
    show_default=True,
    help="How many nodes (node1..nodeN).",
)
@click.option(
    "--gpus",
    type=click.IntRange(1, MAX_GPUS),
    default=4,
    show_default=True,
    help="R9700s in each node's machine (inventory: r9700_expected_gpus).",
)
@click.option(
    "--recorded",
    metavar="SCENARIO",
    help="Recorded node whose outputs the stand-in rocminfo/amd-smi/rocm-smi replay, a directory of "
    "r9700ctl/data/recorded/ (default: r9700-<GPUS>x if recorded, else the most complete R9700 one).",
)
@click.option(
    "--fault",
    "faults",
    metavar="[NODE=]NAME",
    multiple=True,
    callback=_faults,
    help="Plant a fault in a node's machine (repeatable, one per node; without NODE=, the first "
    "goes to node1, the next to node2). See FAULTS below.",
)
@click.option(
    "--cluster-network",
    "cluster",
    is_flag=True,
    help="Also a cluster network: eth1 on every node on a second bridge (links shaped to 500 Mbit/s), a "
    "decoy Docker-style bridge per node, torch (CPU) for the nodes' python3, and the inventory's "
    "r9700_cluster_network: what `r9700ctl validate --cluster` needs.",
)
@dir_option
@click.pass_obj
def up(
    app: Application,
    *,
    nodes: int,
    gpus: int,
    recorded: str | None,
    faults: dict[str, str],
    cluster: bool,
    directory: Path,
) -> None:
    """Build the lab and write DIR/inventory.ini for it.

    Each node presents one R9700 machine built from public recordings of real ones: its PCI
    functions, links, BARs, IOMMU groups, DRM and KFD nodes in /sys, /dev/kfd and /dev/dri, and
    the stand-in amd-smi/rocminfo print the same cards. A lab already up in DIR with the same shape
    is reused; an unfinished one is cleaned up first. If anything fails, what was made so far is
    removed again.

    \b
    Example:
      sudo r9700ctl lab up --nodes 3 --gpus 8 --dir /tmp/lab
      sudo r9700ctl lab up --nodes 3 --fault node3=small-bar   # node3's validate FAILs platform.bar
      sudo r9700ctl lab up --nodes 4 --cluster-network --fault node2=slow-link
    """
    from r9700ctl import lab as lab_api
    from r9700ctl.lab.node import NodeOptions
    from r9700ctl.report.lab import up_lines

    out = Output(app, None)
    started = time.monotonic()
    options = {node: NodeOptions(fault=name) for node, name in faults.items()}
    info = lab_api.up(
        directory,
        nodes=nodes,
        gpus=gpus,
        progress=_progress(out),
        recorded=recorded,
        node_options=options,
        cluster=cluster,
    )
    out.lines(up_lines(info, time.monotonic() - started))
    out.finish(None)


@lab.command()
@dir_option
@json_option("the status", schemas.LAB_STATUS, replaces_text=True)
@click.pass_obj
def status(app: Application, *, directory: Path, json_path: str | None) -> None:
    """Show what of the lab in DIR is running.

    Exit code: 0 when every part is up, 2 when something is down, 3 when DIR holds no lab.

    \b
    Example:
      r9700ctl lab status --dir /tmp/lab
      r9700ctl lab status --dir /tmp/lab --json -            # JSON on standard output
      r9700ctl lab status --dir /tmp/lab --json status.json  # the text, and JSON in a file
    """
    from r9700ctl import lab as lab_api
    from r9700ctl.report.lab import status_exit_code, status_lines

    out = Output(app, json_path, replaces_text=True)
    result = lab_api.status(directory)
    out.lines(status_lines(result))
    out.finish(result.to_json(), status_exit_code(result))


@lab.command()
@click.argument("nodes", nargs=-1)
@dir_option
@click.pass_obj
def dockerd(app: Application, *, nodes: tuple[str, ...], directory: Path) -> None:
    """Start dockerd on provisioned lab nodes (all of them unless NODES are named).

    A lab node has no init system, so `r9700ctl provision` installs and configures Docker but
    starts nothing ("docker installed, service not started: no init system"). This does what an
    operator of such a host does by hand (`dockerd &`) and waits until `docker info` answers; a
    second provision then pulls the pinned image through the lab's registry.

    \b
    Example:
      r9700ctl provision lab/inventory.ini
      sudo r9700ctl lab dockerd
      r9700ctl provision lab/inventory.ini         # pulls the pinned image now
      r9700ctl validate lab/inventory.ini --level config --runtime container
    """
    from r9700ctl.lab import LabInfo

    out = Output(app, None)
    info = LabInfo.load(directory)
    for name in nodes or tuple(n for n, _ in info.nodes):
        info.address(name)  # an unknown node name is one line with the known ones
        info.start_dockerd(name)
        out.line(f"{name}: dockerd answers")
    out.finish(None)


@lab.command()
@dir_option
@click.pass_obj
def down(app: Application, *, directory: Path) -> None:
    """Remove every process, mount, namespace, interface and file of the lab in DIR, then check.

    Keeps the root file system cache in /var/cache/r9700ctl/lab. Safe to run twice and after an
    aborted `up`. Exit code 2 (and a list) if anything is left behind.

    \b
    Example:
      sudo r9700ctl lab down --dir /tmp/lab
    """
    from r9700ctl import lab as lab_api
    from r9700ctl.report.lab import down_lines

    out = Output(app, None)
    out.lines(down_lines(lab_api.down(directory, progress=_progress(out))))
    out.finish(None)
