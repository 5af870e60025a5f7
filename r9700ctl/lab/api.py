"""The lab's public entry points: up, down, status, add_node, and LabInfo for tests and tools."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.errors import BadInput, CannotRun, R9700Error
from r9700ctl.lab import (
    build,
    health,
    hostcheck,
    keys,
    locks,
    machine,
    mirror,
    node,
    processes,
    recordings,
    rootfs,
    state,
    teardown,
)
from r9700ctl.lab.health import LabStatus
from r9700ctl.lab.naming import MAX_NODES, LabNames
from r9700ctl.lab.node import NodeOptions

Progress = Callable[[str], None]
MAX_GPUS = 16


@dataclass
class LabInfo:
    """A running lab: where its files are and how to reach its nodes."""

    directory: Path
    inventory: Path
    ssh_config: Path
    key: Path  # the client's private key (root and r9700 accept it)
    known_hosts: Path
    host_address: str
    subnet: str
    # The mirror, its key and the registry as the inventory names them: by lab-host, the nodes'
    # name for host_address (naming.HOST_NAME), so provision writes the same files in every lab.
    mirror_url: str
    proxy_url: str
    key_url: str
    key_fingerprint: str
    nodes: list[tuple[str, str]]  # (name, address)
    gpus: int
    recordings: str | None  # the recorded scenario the stand-in tools replay
    lab_id: int
    timings: dict[str, float] = field(default_factory=dict)
    registry_url: str = ""  # the stand-in Docker Hub (r9700ctl/lab/registry.py)
    cluster_subnet: str = ""  # `--cluster-network`: the nodes' eth1 network ("" without one)
    cluster_nodes: list[tuple[str, str]] = field(default_factory=list)  # (name, cluster address)

    @classmethod
    def from_state(cls, lab: state.LabState) -> LabInfo:
        directory = Path(lab.directory)
        names = LabNames(lab.lab_id)
        mirror_url = build.node_url(lab.mirror_port)
        return cls(
            directory=directory,
            inventory=directory / "inventory.ini",
            ssh_config=directory / "ssh_config",
            key=directory / keys.CLIENT_KEY,
            known_hosts=directory / "known_hosts",
            host_address=names.host_address,
            subnet=names.subnet,
            mirror_url=mirror_url,
            proxy_url=f"http://{names.host_address}:{lab.proxy_port}",
            key_url=f"{mirror_url}/{mirror.KEY_PATH}",
            key_fingerprint=lab.key_fingerprint,
            nodes=[(n.name, n.address) for n in lab.nodes],
            gpus=lab.gpus,
            recordings=lab.recordings,
            lab_id=lab.lab_id,
            timings=dict(lab.timings),
            registry_url=build.node_url(lab.registry_port) if lab.registry_pid else "",
            cluster_subnet=names.cluster_subnet if lab.cluster else "",
            cluster_nodes=[(n.name, names.cluster_address(n.index)) for n in lab.nodes if lab.cluster],
        )

    @classmethod
    def load(cls, directory: Path) -> LabInfo:
        return cls.from_state(_require_state(directory.expanduser().resolve()))

    def address(self, node_name: str) -> str:
        for name, address in self.nodes:
            if node_name in (name, address):
                return address
        raise BadInput(
            what=f"no lab node '{node_name}'", hint=f"nodes: {', '.join(n for n, _ in self.nodes)}"
        )

    def start_dockerd(self, node_name: str) -> None:
        """Start dockerd on a node as an operator of an init-less host would (`dockerd &`), and wait
        until it answers; the node must be provisioned (docker.io installed). r9700ctl/lab/dockerd.py."""
        from r9700ctl.lab import dockerd

        done = self.ssh(node_name, dockerd.start_command(), user="root", timeout=120)
        dockerd.require_started(node_name, done.returncode, done.stderr)

    def ssh(
        self,
        node_name: str,
        command: str | Sequence[str],
        user: str = rootfs.LAB_USER,
        *,
        timeout: float = 300,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `command` on a node through the lab's ssh_config (host keys checked); never raises on rc."""
        text = command if isinstance(command, str) else shlex.join(command)
        argv = [hostcheck.tool("ssh"), "-F", str(self.ssh_config), f"{user}@{self.address(node_name)}", text]
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)

    def unused_address(self) -> str:
        """An address inside the lab subnet with nothing behind it: connections there time out."""
        return LabNames(self.lab_id).unused_address

    def add_node(
        self, options: NodeOptions | None = None, progress: Progress | None = None
    ) -> tuple[str, str]:
        """Add one more node to this running lab; returns (name, address) and updates the inventory."""
        added = add_node(self.directory, options=options, progress=progress)
        self.nodes.append(added)
        return added

    def node_pid(self, node_name: str) -> int | None:
        """Host PID of the node's PID 1, for `nsenter -t PID -a -r -w` (see docs/lab.md)."""
        lab = _require_state(self.directory)
        return node.pid1(processes.verified(lab.node(node_name).pid, f"{self.directory}/"))


def up(
    directory: Path,
    nodes: int = 2,
    gpus: int = 4,
    progress: Progress | None = None,
    node_options: dict[str, NodeOptions] | None = None,
    recorded: str | None = None,
    cluster: bool = False,
) -> LabInfo:
    """Build a lab of `nodes` Debian 12 nodes in `directory`; returns how to reach it.

    A healthy lab of the same shape already in `directory` is reused; one of another shape is
    refused; an unfinished or broken one is torn down first. If anything fails (or Ctrl-C),
    everything made so far is removed again before the error propagates.
    recorded: the scenario of r9700ctl/data/recorded/ the stand-in tools replay (default: by GPU count).
    cluster: a cluster network besides (eth1 on every node, a decoy Docker-style bridge, torch for
    the nodes' python3): what `r9700ctl validate --cluster` needs; network faults need it.
    """
    options = _check_request(nodes, gpus, node_options, recorded, cluster)
    hostcheck.require_root("lab up")
    hostcheck.require_tools(cluster)
    directory = directory.expanduser().resolve()
    report = progress or _silent
    with locks.directory(directory):
        existing = state.load(directory)
        if existing is not None:
            if _reusable(directory, existing, nodes, gpus, options, cluster):
                report(f"a lab with {nodes} node(s) is already up in {directory}: reusing it")
                return LabInfo.from_state(existing)
            report(f"found an unfinished or broken lab in {directory}: removing it first")
            teardown.down(directory)
        else:
            build.refuse_foreign_files(directory)
        try:
            lab = build.allocate(directory, gpus, cluster)
            build.build(lab, nodes, options, recorded, report)
        except BaseException as exc:
            report("lab up failed: removing what it made")
            _cleanup_after_failure(directory, exc)
            raise
        return LabInfo.from_state(lab)


def _silent(message: str) -> None:
    pass


def _check_request(
    nodes: int,
    gpus: int,
    node_options: dict[str, NodeOptions] | None,
    recorded: str | None,
    cluster: bool = False,
) -> dict[str, NodeOptions]:
    if not 1 <= nodes <= MAX_NODES:
        raise BadInput(what=f"--nodes {nodes} is out of range", hint=f"use 1..{MAX_NODES}")
    if not 1 <= gpus <= MAX_GPUS:
        raise BadInput(what=f"--gpus {gpus} is out of range", hint=f"use 1..{MAX_GPUS}")
    options = dict(node_options or {})
    unknown = sorted(set(options) - {f"node{i}" for i in range(1, nodes + 1)})
    if unknown:
        raise BadInput(
            what=f"node options for unknown node(s) {', '.join(unknown)}", hint=f"nodes: node1..node{nodes}"
        )
    from r9700ctl.lab.netfaults import NET_FAULTS

    for name, option in options.items():
        if option.fault is not None and option.fault not in {**machine.FAULTS, **NET_FAULTS}:
            raise BadInput(
                what=f"{name}: no fault '{option.fault}'",
                hint=f"faults: {', '.join([*machine.FAULTS, *NET_FAULTS])}",
            )
        if option.fault in NET_FAULTS and not cluster:
            raise BadInput(
                what=f"{name}: the fault {option.fault} is on the cluster network, and this lab has none",
                hint="add --cluster-network",
            )
        if option.provisioned is not None:
            _check_provisioned(name, option.provisioned, gpus)
        if option.fault == "link-drop" and name == f"node{nodes}":
            raise BadInput(
                what=f"{name}: link-drop breaks the link to the next node, and {name} is the last",
                hint=f"plant it on node1..node{nodes - 1} (nodeN=link-drop breaks nodeN<->nodeN+1)",
            )
        if option.fault == "acs-redirect" and gpus < 2:
            raise BadInput(
                what="the acs-redirect fault needs 2 or more GPUs per node", hint="use --gpus 2 or more"
            )
    root = recordings.recorded_root()
    if recorded is not None and not (root / recorded).is_dir():
        known = ", ".join(sorted(p.name for p in root.iterdir() if p.is_dir())) if root.is_dir() else ""
        raise BadInput(
            what=f"no recorded scenario '{recorded}'", hint=f"recorded scenarios: {known or 'none'}"
        )
    return options


def _check_provisioned(name: str, release: str, gpus: int) -> None:
    """A node that starts provisioned names a release of the manifest (or auto) with a snapshot."""
    from r9700ctl import manifest as manifest_module
    from r9700ctl.lab import snapshot

    known = ["auto", *manifest_module.load().release_names()]
    if release not in known:
        raise BadInput(
            what=f"{name}: no ROCm release '{release}' to start provisioned with",
            hint=f"releases: {', '.join(known)}",
        )
    snapshot.require(release, gpus, name)


def _reusable(
    directory: Path,
    existing: state.LabState,
    nodes: int,
    gpus: int,
    options: dict[str, NodeOptions],
    cluster: bool = False,
) -> bool:
    """True for a healthy lab of this shape; a healthy lab of another shape is refused."""
    if existing.phase != "up" or not health.probe(directory).healthy:
        return False
    same_options = all(
        {**NodeOptions().to_json(), **n.options} == options.get(n.name, NodeOptions()).to_json()
        for n in existing.nodes
    )
    same_shape = len(existing.nodes) == nodes and existing.gpus == gpus and existing.cluster == cluster
    if same_shape and same_options:
        return True
    raise BadInput(
        what=f"{directory} already holds a lab of {len(existing.nodes)} node(s) x {existing.gpus} GPU(s)",
        hint=f"take it down first: r9700ctl lab down --dir {directory}",
    )


def _cleanup_after_failure(directory: Path, original: BaseException) -> None:
    try:
        teardown.down(directory)
    except R9700Error as exc:
        if isinstance(original, R9700Error):
            joined = f"{original.hint}; " if original.hint else ""
            original.hint = f"{joined}cleanup incomplete: {exc.what}"
    with contextlib.suppress(OSError):
        directory.rmdir()  # made by this `up` and empty again (never removes a non-empty one)


def _require_state(directory: Path) -> state.LabState:
    lab = state.load(directory)
    if lab is None:
        raise CannotRun(what=f"no lab in {directory}", hint=f"start one: r9700ctl lab up --dir {directory}")
    return lab


def add_node(
    directory: Path, options: NodeOptions | None = None, progress: Progress | None = None
) -> tuple[str, str]:
    """One more node in a running lab (e.g. a special one for a single test)."""
    hostcheck.require_root("lab up")
    directory = directory.expanduser().resolve()
    with locks.directory(directory):
        lab = _require_state(directory)
        if lab.phase != "up":
            raise CannotRun(what=f"the lab in {directory} is not up", hint="run r9700ctl lab up first")
        index = max((n.index for n in lab.nodes), default=0) + 1
        if index > MAX_NODES:
            raise BadInput(what=f"a lab holds at most {MAX_NODES} nodes")
        config = build.create_node(lab, index, options or NodeOptions(), progress or _silent)
        build.write_client_files(lab)
        build.wait_node(lab, config)
        return config.name, config.address


def status(directory: Path) -> LabStatus:
    """What of the lab in `directory` is running (needs no root)."""
    return health.probe(directory.expanduser().resolve())


def down(directory: Path, progress: Progress | None = None) -> teardown.DownReport:
    """Remove everything the lab in `directory` made and check that nothing is left."""
    hostcheck.require_root("lab down")
    directory = directory.expanduser().resolve()
    with locks.directory(directory):
        return teardown.down(directory, progress)
