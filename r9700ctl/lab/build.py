"""How `lab up` builds a lab, step by step, recording in lab.json what exists after each step."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from r9700ctl import manifest as manifest_module
from r9700ctl.agent.atomic import write_atomic
from r9700ctl.errors import BadInput, CannotRun
from r9700ctl.lab import (
    aptrepo,
    debian_subset,
    dockerd,
    files,
    keys,
    locks,
    machine,
    mirror,
    netfaults,
    network,
    node,
    processes,
    proxy,
    recordings,
    registry,
    rootfs,
    snapshot,
    state,
    torchsite,
)
from r9700ctl.lab.naming import DEBIAN_HOST_NAME, HOST_NAME, LabNames, choose_lab_id
from r9700ctl.lab.node import NodeOptions

Progress = Callable[[str], None]
MIRROR_PORT = 8080
PROXY_PORT = 3142
REGISTRY_PORT = registry.PORT
DEBIAN_PATH = "debian"  # the cut of Debian below the mirror's root (its pool/ redirects to Debian)


def refuse_foreign_files(directory: Path) -> None:
    """Never write over (and later delete) files of the user that happen to carry a lab name."""
    clashing = [name for name in state.LAB_ENTRIES if (directory / name).exists()]
    if clashing:
        raise BadInput(
            what=f"{directory} is not a lab directory but holds {', '.join(clashing)}",
            hint="choose an empty or new directory with --dir",
        )


def allocate(directory: Path, gpus: int, cluster: bool = False) -> state.LabState:
    """Claim a lab id: choose it and create its bridge under a host-wide lock.

    The bridge (and its address) is what marks the id as taken for every later `lab up`.
    """
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    with locks.lab_ids():
        lab_id = choose_lab_id(network.used_octets(), [*network.netns_names(), *network.link_names()])
        lab = state.LabState(
            directory=str(directory), lab_id=lab_id, gpus=gpus, boot_id=state.boot_id(), cluster=cluster
        )
        state.save(lab)
        try:
            network.create_bridge(LabNames(lab_id))
        finally:  # recorded even when configuring it failed: `down` deletes only a bridge it knows
            lab.bridge_ifindex = network.link_ifindex(LabNames(lab_id).bridge)
            state.save(lab)
    return lab


def build(
    lab: state.LabState, count: int, options: dict[str, NodeOptions], recorded: str | None, report: Progress
) -> None:
    """Everything after the bridge: root file system, mirror, proxy, nodes, client files; then wait."""
    directory = Path(lab.directory)
    names = LabNames(lab.lab_id)
    clock = _StepClock(lab)
    report(f"lab {names.prefix}: bridge {names.bridge}, subnet {names.subnet}")

    lab.debian_mirror = rootfs.debian_mirror()
    lab.base = str(rootfs.ensure_base(lab.debian_mirror, directory / "logs/debootstrap.log", report))
    lab.rootfs_cache = str(rootfs.cache_path())
    clock.done("rootfs")

    keys.ensure_client_key(directory)
    lab.control_dir = str(keys.control_dir(directory, lab.lab_id))
    Path(lab.control_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    standin_names = _build_mirror(lab, recorded, report)
    clock.done("mirror")
    _build_registry(lab, report)
    clock.done("registry")

    if lab.cluster:
        lab.torch_site = str(torchsite.ensure(report))
        state.save(lab)
        network.create_cluster_bridge(names)
        report(f"cluster network: bridge {names.cluster_bridge}, subnet {names.cluster_subnet} "
               f"({network.CLUSTER_LINK_MBIT} Mbit/s links); torch bound into every node")  # fmt: skip
        clock.done("cluster")

    _start_services(lab, names)
    _cut_debian(lab, names, standin_names, report)
    clock.done("debian")
    configs = [
        create_node(lab, i, options.get(f"node{i}", NodeOptions()), report) for i in range(1, count + 1)
    ]
    clock.done("nodes")

    write_client_files(lab)
    _wait_services(lab, names, report)
    for config in configs:
        wait_node(lab, config)
    clock.done("ready")
    lab.phase = "up"
    state.save(lab)
    report(f"{count} node(s) answer over SSH; inventory: {directory / 'inventory.ini'}")


class _StepClock:
    """Seconds per step, kept in lab.json (`timings`) for the record."""

    def __init__(self, lab: state.LabState) -> None:
        self.lab = lab
        self.last = time.monotonic()

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.lab.timings[step] = round(now - self.last, 2)
        self.last = now
        state.save(self.lab)


def _build_mirror(lab: state.LabState, recorded: str | None, report: Progress) -> frozenset[str]:
    """The stand-ins' mirror; returns the names of the packages it publishes."""
    directory = Path(lab.directory)
    # One signing key per host (cached like the root file system): a keyring provision installed
    # in one lab is the keyring of every other, so a provisioned node's snapshot fits them all.
    signer = aptrepo.Signer.from_cache(rootfs.cache_dir(), directory / "gnupg")
    lab.key_fingerprint = signer.fingerprint
    root = recordings.recorded_root()
    lab.recordings = recorded or recordings.choose(recordings.available(root), lab.gpus)
    replay = recordings.load(root, lab.recordings)
    try:
        summary = mirror.build(
            directory / "mirror",
            manifest=manifest_module.load(),
            recordings=replay,
            kernel_release=os.uname().release,
            signer=signer,
            origin=HOST_NAME,  # the apt pin names the URL's host (r9700_repos), and that is lab-host
        )
    finally:
        signer.close()
    replayed = ", ".join(sorted(replay.outputs)) or "none"
    report(
        f"mirror: {summary.packages} stand-in packages in {summary.repositories} signed repositories "
        f"(ROCm {', '.join(summary.releases)}); tools replay {lab.recordings or 'no recording'} ({replayed})"
    )
    return summary.names


def _build_registry(lab: state.LabState, report: Progress) -> None:
    """The stand-in rocm/pytorch image (built once per host), for the registry to serve."""
    refs = registry.pinned_images(manifest_module.load())
    storage = registry.ensure_storage(rootfs.cache_dir(), Path(lab.base), refs, _log(lab, "registry-build"))
    lab.registry_storage = str(storage)
    state.save(lab)
    tags = ", ".join(sorted({r.tag.split("_")[0] for r in refs}))
    report(f"registry: a stand-in image (Debian + python3, no torch) as rocm/pytorch for {tags}")


def _start_services(lab: state.LabState, names: LabNames) -> None:
    directory = Path(lab.directory)
    lab.mirror_port = processes.free_port(names.host_address, MIRROR_PORT)
    lab.proxy_port = processes.free_port(names.host_address, PROXY_PORT)
    lab.mirror_pid = mirror.serve(
        directory / "mirror",
        names.host_address,
        lab.mirror_port,
        _log(lab, "mirror"),
        redirects={f"/{DEBIAN_PATH}/pool/": f"{lab.debian_mirror.rstrip('/')}/pool/"},
    )
    state.save(lab)
    lab.proxy_pid = proxy.start(directory, names.host_address, lab.proxy_port, _log(lab, "apt-cacher-ng"))
    state.save(lab)
    lab.registry_port = processes.free_port(names.host_address, REGISTRY_PORT)
    lab.registry_pid = registry.serve(
        Path(lab.registry_storage), directory, names.host_address, lab.registry_port, _log(lab, "registry")
    )
    state.save(lab)


def _cut_debian(lab: state.LabState, names: LabNames, standins: frozenset[str], report: Progress) -> None:
    """The nodes' Debian source: the lab's cut of bookworm main (r9700ctl/lab/debian_subset.py),
    read through the lab's apt proxy; the whole archive where Debian's index cannot be read."""
    host = names.host_address
    _wait_service(host, "apt proxy", lab.proxy_port, lab.proxy_pid, _log(lab, "apt-cacher-ng"))
    if debian_subset.ensure(
        Path(lab.directory) / "mirror" / DEBIAN_PATH,
        rootfs.cache_dir(),
        debian_subset.installed(Path(lab.base)) | standins,
        lab.key_fingerprint,
        lab.debian_mirror.rstrip("/"),
        f"http://{host}:{lab.proxy_port}",
        report,
    ):
        lab.debian_url = f"http://{DEBIAN_HOST_NAME}:{lab.mirror_port}/{DEBIAN_PATH}"
    state.save(lab)


def _log(lab: state.LabState, name: str) -> Path:
    return Path(lab.directory) / "logs" / f"{name}.log"


def _wait_services(lab: state.LabState, names: LabNames, report: Progress) -> None:
    host = names.host_address
    for label, port, pid, log in (
        ("mirror", lab.mirror_port, lab.mirror_pid, _log(lab, "mirror")),
        ("apt proxy", lab.proxy_port, lab.proxy_pid, _log(lab, "apt-cacher-ng")),
        ("container registry", lab.registry_port, lab.registry_pid, _log(lab, "registry")),
    ):
        _wait_service(host, label, port, pid, log)
    report(
        f"mirror at http://{host}:{lab.mirror_port}, apt proxy at http://{host}:{lab.proxy_port}, "
        f"container registry at http://{host}:{lab.registry_port}"
    )


def _wait_service(host: str, label: str, port: int, pid: int | None, log: Path) -> None:
    if not processes.wait_for_port(host, port, timeout=15, pid=pid):
        raise CannotRun(what=f"the lab's {label} did not start on {host}:{port}: {processes.tail(log)}")


def node_url(port: int) -> str:
    """A lab service's URL as the nodes are given it: by the name they resolve to the lab host."""
    return f"http://{HOST_NAME}:{port}"


def node_paths(lab: state.LabState, name: str) -> node.NodePaths:
    return node.NodePaths(Path(lab.directory) / "nodes" / name)


def create_node(lab: state.LabState, index: int, options: NodeOptions, report: Progress) -> node.NodeConfig:
    """Network, files and PID 1 of node<index>; recorded in lab.json before each resource exists."""
    names = LabNames(lab.lab_id)
    directory = Path(lab.directory)
    name = f"node{index}"
    entry = state.NodeState(
        name=name,
        index=index,
        address=names.node_address(index),
        netns=names.netns(index),
        veth=names.veth(index),
        options=options.to_json(),
        cgroups=dockerd.node_cgroups(names.netns(index)),
    )
    lab.nodes.append(entry)
    state.save(lab)
    network.add_node_link(names, index)
    if lab.cluster:
        network.add_node_cluster_link(names, index)
        if options.fault in netfaults.NET_FAULTS:
            netfaults.plant(names, index, options.fault)
    presented = machine.build(lab.gpus, options.fault if options.fault in machine.FAULTS else None)
    config = node.NodeConfig(
        name=name,
        address=entry.address,
        host_address=names.host_address,
        mirror_url=node_url(lab.mirror_port),
        proxy_port=lab.proxy_port,
        debian_mirror=lab.debian_mirror,
        client_public_key=(directory / f"{keys.CLIENT_KEY}.pub").read_text(),
        lab_key_armored=(directory / "mirror" / mirror.KEY_PATH).read_bytes(),
        options=options,
        machine=presented,
        tool_outputs=machine.tool_outputs(presented, recordings.recorded_root()),
        cluster_address=names.cluster_address(index) if lab.cluster else "",
        torch_site=lab.torch_site,
        debian_url=lab.debian_url,
    )
    paths = node_paths(lab, name)
    lower: node.Lower = Path(lab.base)
    if options.provisioned:
        lower = (snapshot.require(options.provisioned, lab.gpus, name), Path(lab.base))
    host_key, notes = node.prepare(paths, lower, config)
    (paths.directory / "host_key.pub").write_text(host_key + "\n")
    binds = ((lab.torch_site, torchsite.NODE_DIR),) if lab.torch_site else ()
    entry.pid = node.start(entry.netns, name, lower, paths, options.sshd, config.machine, binds)
    state.save(lab)
    if node.pid1(entry.pid, timeout=5.0) is None:
        raise CannotRun(what=f"{name} did not start: {processes.tail(paths.console)}")
    extra = f" ({'; '.join(notes)})" if notes else ""
    report(f"{name} started at {entry.address} (netns {entry.netns}){extra}")
    return config


def wait_node(lab: state.LabState, config: node.NodeConfig) -> None:
    if not config.options.sshd:
        return
    entry = lab.node(config.name)
    ssh_config = Path(lab.directory) / "ssh_config"
    node.wait_ready(config, ssh_config, entry.pid or 0, node_paths(lab, entry.name).console)


def write_client_files(lab: state.LabState) -> None:
    """known_hosts, ssh_config and inventory.ini, each written atomically."""
    directory = Path(lab.directory)
    names = LabNames(lab.lab_id)
    nodes = [files.InventoryNode(n.name, n.address) for n in lab.nodes]
    host_keys = [(n, (node_paths(lab, n.name).directory / "host_key.pub").read_text().strip()) for n in nodes]
    key, known_hosts, ssh_config = (
        directory / keys.CLIENT_KEY,
        directory / "known_hosts",
        directory / "ssh_config",
    )
    mirror_url = node_url(lab.mirror_port)
    write_atomic(known_hosts, files.render_known_hosts(host_keys))
    write_atomic(
        ssh_config,
        files.render_ssh_config(
            nodes=nodes,
            key=key,
            known_hosts=known_hosts,
            control_dir=Path(lab.control_dir),
            user=rootfs.LAB_USER,
        ),
    )
    write_atomic(
        directory / "inventory.ini",
        files.render_inventory(
            directory=directory,
            nodes=nodes,
            key=key,
            ssh_config=ssh_config,
            mirror_url=mirror_url,
            key_url=f"{mirror_url}/{mirror.KEY_PATH}",
            key_fingerprint=lab.key_fingerprint,
            gpus=lab.gpus,
            registry_url=node_url(lab.registry_port),
            cluster_subnet=names.cluster_subnet if lab.cluster else "",
            cluster_line_rate_mbps=network.CLUSTER_LINK_MBIT,
        ),
    )
