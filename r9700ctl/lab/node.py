"""One lab node: an overlay over the shared root file system, its own namespaces, sshd as PID 1.

The node's processes live in a fresh PID, mount, UTS and IPC namespace inside its network
namespace (`unshare --fork --kill-child`), chrooted into its overlay. Every mount the node has
(the overlay itself, proc, a read-only sysfs and /proc/sys, a minimal /dev, tmpfs /run) exists
only in its private mount namespace and vanishes with its PID 1. Read-only /proc/sys and /sys
and a /dev without disks are safety: a node runs as real root on the lab host.

The node's R9700 machine (r9700ctl/lab/machine.py) is grafted into its /sys where the kernel
puts such a machine: /sys/devices, /sys/bus, /sys/class, /sys/module and /sys/kernel become
read-only tmpfs holding the machine's entries (PCI functions, DRM, KFD, amdgpu, IOMMU groups)
merged with bind mounts of the real ones (net, block, the host's own disk and its drivers);
/dev gets /dev/kfd and the DRM nodes. Its amd-smi and rocminfo outputs go to MACHINE_DIR, where
the stand-in tools look.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from r9700ctl.errors import CannotRun
from r9700ctl.lab import dockerd, keys, machine, processes, zipcode
from r9700ctl.lab.hostcheck import tool
from r9700ctl.lab.naming import DEBIAN_HOST_NAME, HOST_NAME
from r9700ctl.lab.rootfs import LAB_USER, SUITE

PROXY_FILE = "etc/apt/apt.conf.d/00lab-proxy"
KERNEL_SOURCE_FILE = "etc/apt/sources.list.d/r9700ctl-lab-kernel.sources"
KERNEL_KEY_FILE = "etc/apt/keyrings/r9700ctl-lab-kernel.asc"
DEBIAN_KEY_FILE = "etc/apt/keyrings/r9700ctl-lab-debian.asc"  # the lab key, for its cut of Debian
# Where the stand-in amd-smi/rocminfo/rocm-smi find this node's outputs (standins.tool_script).
MACHINE_DIR = "var/lib/r9700ctl-lab/machine"
HOST_KEY = "etc/ssh/ssh_host_ed25519_key"
# What the lab itself writes into a node (_write_files, keys.make_host_key): its own, not what a
# provision made, so a snapshot of a provisioned node leaves it out and each node writes it anew.
PLUMBING = (
    "etc/hostname",
    "etc/hosts",
    "etc/resolv.conf",
    "etc/apt/sources.list",
    PROXY_FILE,
    KERNEL_SOURCE_FILE,
    KERNEL_KEY_FILE,
    DEBIAN_KEY_FILE,
    "root/.ssh/authorized_keys",
    f"home/{LAB_USER}/.ssh/authorized_keys",
    MACHINE_DIR,
    HOST_KEY,
    f"{HOST_KEY}.pub",
    zipcode.MODULE_FILE,
    zipcode.PTH_FILE,
)
# The /sys directories that get the machine's entries (the rest of /sys is the real one).
GRAFTED = ("devices", "bus", "class", "module", "kernel")


@dataclass(frozen=True)
class NodeOptions:
    """How a node deviates from a healthy one (for tests of the doctor and the preflight).

    kernel_headers: False leaves out the lab-kernel apt source, so the running kernel has no
    linux-headers candidate. sudo: False takes passwordless sudo from the r9700 user.
    sshd: False creates the node (namespace, address, file system) but starts no sshd, so
    connections to it are refused. fault: one of machine.FAULTS, planted in the node's machine,
    or of netfaults.NET_FAULTS (a lab with a cluster network), planted on its network.
    """

    kernel_headers: bool = True
    sudo: bool = True
    sshd: bool = True
    fault: str | None = None  # a machine.FAULTS or netfaults.NET_FAULTS name
    # A release name ("auto", "6.4.1"): the node starts as one cold `r9700ctl provision` with that
    # release left it (a snapshot, r9700ctl/lab/snapshot.py), else as a bare Debian 12 server.
    provisioned: str | None = None

    def to_json(self) -> dict[str, bool | str | None]:
        return asdict(self)


@dataclass(frozen=True)
class NodePaths:
    directory: Path

    @property
    def root(self) -> Path:
        return self.directory / "root"

    @property
    def upper(self) -> Path:
        return self.directory / "upper"

    @property
    def work(self) -> Path:
        return self.directory / "work"

    @property
    def init(self) -> Path:
        return self.directory / "init.sh"

    @property
    def console(self) -> Path:
        return self.directory / "console.log"

    @property
    def machine_sys(self) -> Path:
        """The machine's /sys entries, grafted into the node's /sys by its init."""
        return self.directory / "machine" / "sys"

    @property
    def sys_stash(self) -> Path:
        """Mount points (inside the node's mount namespace only) for the real /sys directories."""
        return self.directory / "sys-real"


@dataclass(frozen=True)
class NodeConfig:
    """What the lab tells a node about its world."""

    name: str
    address: str
    host_address: str
    mirror_url: str
    proxy_port: int
    debian_mirror: str
    client_public_key: str
    lab_key_armored: bytes
    options: NodeOptions
    machine: machine.Machine
    tool_outputs: dict[str, bytes]
    cluster_address: str = ""  # its address on the cluster network ("" in a lab without one)
    torch_site: str = ""  # host directory of torch, bound read-only at torchsite.NODE_DIR
    # The lab's cut of Debian (r9700ctl/lab/debian_subset.py); "": the whole archive at debian_mirror.
    debian_url: str = ""


# A node's lower layers, top first: the shared root file system alone, or a provisioned node's
# snapshot above it (r9700ctl/lab/snapshot.py).
Lower = Path | tuple[Path, ...]


def layers(lower: Lower) -> tuple[Path, ...]:
    return (lower,) if isinstance(lower, Path) else tuple(lower)


def overlay_options(lower: Lower, paths: NodePaths) -> str:
    stack = ":".join(str(layer) for layer in layers(lower))
    return f"lowerdir={stack},upperdir={paths.upper},workdir={paths.work}"


def prepare(paths: NodePaths, base: Lower, config: NodeConfig) -> tuple[str, list[str]]:
    """Write the node's own files into its overlay; returns (host public key, notes).

    The overlay is mounted on the host only while we write; the node mounts it again inside
    its own mount namespace when it starts.
    """
    for directory in (paths.root, paths.upper, paths.work):
        directory.mkdir(parents=True, exist_ok=True)
    mount = tool("mount")
    processes.run(
        [mount, "-t", "overlay", f"r97-{config.name}", "-o", overlay_options(base, paths), str(paths.root)],
        what=f"mount {config.name}'s overlay (needs overlayfs)",
    )
    _write_machine(paths, config.machine)
    try:
        return _write_files(paths.root, config)
    finally:
        processes.run([tool("umount"), str(paths.root)], what=f"unmount {config.name}'s overlay")


def _write_files(root: Path, config: NodeConfig) -> tuple[str, list[str]]:
    uid, gid = _user_ids(root, LAB_USER)
    host = config.host_address
    write(root, "etc/hostname", f"{config.name}\n")
    write(root, "etc/hosts", hosts_file(config))
    write(
        root,
        "etc/resolv.conf",
        "# r9700ctl lab: no DNS in a node; apt reaches Debian through the lab proxy\n",
    )
    if config.debian_url:
        write(root, DEBIAN_KEY_FILE, config.lab_key_armored)
        source = f"deb [signed-by=/{DEBIAN_KEY_FILE}] {config.debian_url} {SUITE} main"
    else:
        source = f"deb {config.debian_mirror} {SUITE} main"
    write(root, "etc/apt/sources.list", f"{source}\n")
    write(
        root,
        PROXY_FILE,
        "// r9700ctl lab plumbing: Debian's packages through the lab's apt-cacher-ng, the lab mirror\n"
        "// (its stand-ins and its cut of Debian's index) directly.\n"
        f'Acquire::http::Proxy "http://{host}:{config.proxy_port}";\n'
        f'Acquire::http::Proxy::{host} "DIRECT";\n'
        f'Acquire::http::Proxy::{HOST_NAME} "DIRECT";\n'
        f'Acquire::http::Proxy::{DEBIAN_HOST_NAME} "DIRECT";\n',
    )
    if config.options.kernel_headers:
        write(root, KERNEL_KEY_FILE, config.lab_key_armored)
        write(
            root,
            KERNEL_SOURCE_FILE,
            "# r9700ctl lab plumbing: stand-in headers for the host kernel the lab's nodes run on.\n"
            "Types: deb\n"
            f"URIs: {config.mirror_url}/lab-kernel\n"
            f"Suites: {SUITE}\n"
            "Components: main\n"
            f"Signed-By: /{KERNEL_KEY_FILE}\n",
        )
    authorized = (config.client_public_key.strip() + "\n").encode()
    write(root, "root/.ssh/authorized_keys", authorized, mode=0o600)
    home = f"home/{LAB_USER}"
    write(root, f"{home}/.ssh/authorized_keys", authorized, mode=0o600, owner=(uid, gid), dir_mode=0o700)
    for name, data in config.tool_outputs.items():
        write(root, f"{MACHINE_DIR}/{name}", data)
    for relative, text in zipcode.files().items():
        write(root, relative, text)
    if config.torch_site:
        from r9700ctl.lab import torchsite

        write(root, torchsite.PTH_FILE, f"/{torchsite.NODE_DIR}\n")
    if config.machine.environment:
        current = (root / "etc/environment").read_text() if (root / "etc/environment").is_file() else ""
        write(root, "etc/environment", current + "".join(f"{line}\n" for line in config.machine.environment))
    notes = []
    if config.machine.fault:
        notes.append(f"fault {config.machine.fault}: {machine.FAULTS[config.machine.fault].what}")
    if config.options.fault and config.options.fault not in machine.FAULTS:
        from r9700ctl.lab.netfaults import NET_FAULTS

        notes.append(f"fault {config.options.fault}: {NET_FAULTS[config.options.fault].what}")
    if not config.options.sudo:
        remove(root, f"etc/sudoers.d/{LAB_USER}")
        notes.append(f"{LAB_USER} has no sudo")
    if not config.options.kernel_headers:
        notes.append("no lab-kernel source (no headers candidate)")
    if not config.options.sshd:
        notes.append("sshd not started")
    if config.options.provisioned:
        notes.append(f"starts provisioned (ROCm {config.options.provisioned}, from a snapshot)")
    return keys.make_host_key(root, config.name), notes


def hosts_file(config: NodeConfig) -> str:
    """/etc/hosts: the node's name on its cluster address where it has one (as a cluster's hosts
    resolve to the data network), else on its lab address; the hostname-loopback fault maps it to
    127.0.1.1 as Debian's installer does (Debian Reference, 5.1.1 "The hostname resolution")."""
    own = config.cluster_address or config.address
    if config.options.fault == "hostname-loopback":
        own = "127.0.1.1"
    return (
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        f"{own}\t{config.name}\n{config.host_address}\t{HOST_NAME} {DEBIAN_HOST_NAME}\n"
    )


def _write_machine(paths: NodePaths, presented: machine.Machine) -> None:
    """The machine's /sys entries in the node's directory, fresh each time (the init grafts them)."""
    if paths.machine_sys.parent.exists():
        shutil.rmtree(paths.machine_sys.parent)
    machine.write_sysfs(presented, paths.machine_sys)
    (paths.machine_sys.parent / "machine.json").write_text(machine.summary_json(presented))


def device_group_id(base: Lower) -> int:
    """The group the node's init gives /dev/kfd and the DRM nodes: render, else video, as the
    pristine root file system (the bottom layer) has them, 0 when neither is there.

    The lab has no udev, so the roles' rules never regroup the device nodes: a cold-provisioned node
    keeps the group its init gave, and its converged record says so. A node that starts from that
    node's snapshot gets the same group (not the render group the snapshot's /etc/group now has), so
    the converged check finds its device nodes as the cold run left them."""
    try:
        lines = (layers(base)[-1] / "etc/group").read_text().splitlines()
    except OSError:
        return 0
    groups = {f[0]: int(f[2]) for f in (line.split(":") for line in lines) if len(f) > 2 and f[2].isdigit()}
    return next((groups[n] for n in ("render", "video") if n in groups), 0)


def _user_ids(root: Path, user: str) -> tuple[int, int]:
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise CannotRun(
        what=f"the lab root file system has no user {user}", hint="remove the rootfs cache and retry"
    )


def _safe_path(root: Path, relative: str) -> Path:
    """root/relative, refusing symlinks on the way: an absolute link would lead onto the host."""
    path = root
    for part in Path(relative).parts:
        if path.is_symlink():
            raise CannotRun(what=f"refusing to write through the symlink {path} in a node's root")
        path = path / part
    return path


def write(
    root: Path,
    relative: str,
    content: str | bytes,
    *,
    mode: int = 0o644,
    owner: tuple[int, int] | None = None,
    dir_mode: int = 0o755,
) -> None:
    path = _safe_path(root, relative)
    parent = path.parent
    if not parent.is_dir():
        parent.mkdir(parents=True, mode=dir_mode)
        if owner:
            os.chown(parent, *owner)
    if path.is_symlink():
        path.unlink()
    data = content.encode() if isinstance(content, str) else content
    path.write_bytes(data)
    path.chmod(mode)
    if owner:
        os.chown(path, *owner)


def remove(root: Path, relative: str) -> None:
    path = _safe_path(root, relative)
    if path.exists() or path.is_symlink():
        path.unlink()


GRAFT_FUNCTION = """\
# merge REAL DIR: add to DIR (the machine's copy, in a tmpfs) every entry of REAL it lacks, as a
# bind mount (directories, files) or a copy (symlinks); directories both have are merged deeper,
# so the host's own devices (the disk under pci0000:00, its drivers) stay reachable; only the
# list of PCI functions, /sys/bus/pci/devices, is the machine's alone.
merge() {
    local e n t
    for e in "$1"/*; do
        [ -e "$e" ] || [ -L "$e" ] || continue
        n=${e##*/}
        t="$2/$n"
        if [ -L "$t" ]; then continue; fi
        if [ -d "$t" ]; then
            case "$t" in */bus/pci/devices) continue ;; esac  # the PCI bus is the machine's alone
            if [ -d "$e" ] && [ ! -L "$e" ]; then merge "$e" "$t"; fi
            continue
        fi
        if [ -e "$t" ]; then continue; fi
        if [ -L "$e" ]; then cp -P "$e" "$t"
        elif [ -d "$e" ]; then mkdir "$t"; mount --bind "$e" "$t"
        else : > "$t"; mount --bind "$e" "$t"; fi
    done
}
# graft D: /sys/D becomes a read-only tmpfs holding the machine's entries ($M/D) merged with the
# real ones (stashed under $S/D first).
graft() {
    mkdir -p "$S/$1"
    mount --bind "$R/sys/$1" "$S/$1"
    mount -t tmpfs -o mode=755,nosuid,nodev,noexec r97-sys "$R/sys/$1"
    if [ -d "$M/$1" ]; then cp -a "$M/$1/." "$R/sys/$1/"; fi
    merge "$S/$1" "$R/sys/$1"
    mount -o remount,ro "$R/sys/$1"
}
"""


def machine_lines(paths: NodePaths, presented: machine.Machine, gid: int) -> str:
    """Init lines that graft the machine into /sys and make its /dev nodes."""
    lines = [
        f"M={shlex.quote(str(paths.machine_sys))}",
        f"S={shlex.quote(str(paths.sys_stash))}",
        GRAFT_FUNCTION.rstrip(),
        *(f"graft {d}" for d in GRAFTED),
        'mkdir -p "$R/dev/dri"',
    ]
    for path, major, minor in machine.dev_nodes(presented):
        lines.append(f'mknod -m 660 "$R/dev/{path}" c {major} {minor}')
        lines.append(f'chgrp {gid} "$R/dev/{path}"')
    return "\n".join(lines) + "\n"


def bind_lines(binds: tuple[tuple[str, str], ...]) -> str:
    """Init lines binding host directories read-only into the node (SOURCE, path in the node)."""
    lines = []
    for source, inside in binds:
        target = f'"$R/{inside}"'
        lines += [f"mkdir -p {target}", f"mount --bind {shlex.quote(source)} {target}",
                  f"mount -o remount,bind,ro {target}"]  # fmt: skip
    return "".join(f"{line}\n" for line in lines)


def init_script(
    name: str,
    base: Lower,
    paths: NodePaths,
    sshd: bool,
    presented: machine.Machine | None = None,
    binds: tuple[tuple[str, str], ...] = (),
) -> str:
    """The node's PID 1 until it execs sshd: mounts inside its private mount namespace only."""
    root = shlex.quote(str(paths.root))
    overlay = shlex.quote(overlay_options(base, paths))
    final = "/usr/sbin/sshd -D -e" if sshd else "/bin/sleep infinity"
    grafted = machine_lines(paths, presented, device_group_id(base)) if presented else ""
    return f"""#!/bin/sh
# r9700ctl lab: init of {name}. Runs as PID 1 of the node's own PID namespace.
set -e
R={root}
hostname {shlex.quote(name)}
mount -t overlay r97-{name} -o {overlay} "$R"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
mount --bind "$R/proc/sys" "$R/proc/sys"
mount -o remount,bind,ro "$R/proc/sys"
if [ -e "$R/proc/sysrq-trigger" ]; then mount --bind /dev/null "$R/proc/sysrq-trigger"; fi
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
mount -t tmpfs -o mode=755,nosuid tmpfs "$R/dev"
mknod -m 666 "$R/dev/null" c 1 3
mknod -m 666 "$R/dev/zero" c 1 5
mknod -m 666 "$R/dev/full" c 1 7
mknod -m 666 "$R/dev/random" c 1 8
mknod -m 666 "$R/dev/urandom" c 1 9
mknod -m 666 "$R/dev/tty" c 5 0
mkdir -p "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$R/run"
mkdir -p "$R/run/sshd" "$R/run/lock"
{grafted}{bind_lines(binds)}{dockerd.init_lines(paths.directory)}
exec chroot "$R" {final}
"""


def start(
    netns: str,
    name: str,
    base: Lower,
    paths: NodePaths,
    sshd: bool,
    presented: machine.Machine | None = None,
    binds: tuple[tuple[str, str], ...] = (),
) -> int:
    """Start the node; returns the PID of `unshare` (its only child is the node's PID 1)."""
    paths.init.write_text(init_script(name, base, paths, sshd, presented, binds))
    argv = [
        tool("ip"), "netns", "exec", netns,
        tool("unshare"), "--mount", "--uts", "--ipc", "--pid", "--cgroup", "--fork", "--kill-child",
        "--propagation", "private",
        "/bin/sh", str(paths.init),
    ]  # fmt: skip
    # Its own cgroups first, so the cgroup namespace (and what dockerd creates) is rooted there.
    return processes.spawn(dockerd.enter_node_cgroups(netns, argv), paths.console)


def stop(unshare_pid: int | None) -> bool:
    """Kill a running node (its PID 1, and with it its PID namespace); True if it was running."""
    if unshare_pid is None:
        return False
    first = pid1(unshare_pid)
    if first is not None:
        # SIGKILL, not TERM: an init without a handler ignores TERM from outside its namespace.
        with contextlib.suppress(ProcessLookupError):
            os.kill(first, signal.SIGKILL)
    # unshare exits once its child is gone; killing unshare (--kill-child) takes the child along.
    if not processes.wait_gone(unshare_pid, 5.0):
        processes.stop(unshare_pid, grace=5.0, sig=signal.SIGKILL)
    return True


def pid1(unshare_pid: int | None, timeout: float = 0.0) -> int | None:
    """Host PID of the node's PID 1 (sshd), or None when the node is not running."""
    deadline = time.monotonic() + timeout
    while True:
        if not processes.alive(unshare_pid):
            return None
        assert unshare_pid is not None
        found = processes.children(unshare_pid)
        if found:
            return found[0]
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def wait_ready(
    config: NodeConfig, ssh_config: Path, unshare_pid: int, console: Path, timeout: float = 30
) -> None:
    """sshd answers and accepts the lab key as the lab user with host-key checking on."""
    if not processes.wait_for_port(config.address, 22, timeout, pid=unshare_pid):
        raise CannotRun(what=f"{config.name}: sshd did not come up: {processes.tail(console)}")
    argv = [
        tool("ssh"),
        "-F",
        str(ssh_config),
        "-o",
        "ControlPath=none",
        f"{LAB_USER}@{config.address}",
        "true",
    ]
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise CannotRun(what=f"{config.name}: ssh login failed: {proc.stderr.strip() or proc.returncode}")
        time.sleep(0.1)
