"""What a lab node needs to run dockerd, and starting it there (the node has no init system).

dockerd refuses a bare node ("Devices cgroup isn't mounted"): the node has no cgroup mounts, and
overlay2 does not stack on the node's overlay root. So each node gets:
  * its own cgroup in every hierarchy the host has, below the cgroup the lab runs in
    (`r9700ctl-<netns>`), and a cgroup namespace rooted there: inside, the node mounts the
    hierarchies as a host would (tmpfs /sys/fs/cgroup plus one mount each), and what dockerd
    creates stays under the node's cgroup, removed with the lab;
  * /var/lib/docker bound from DIR/nodes/<node>/docker on the lab directory's file system
    (ext4, xfs or tmpfs, never overlayfs), so dockerd's overlay2 has a real upper directory;
  * a writable /proc/sys/net (only the node's own network namespace: dockerd sets ip_forward
    there), while the rest of /proc/sys stays read-only.
Nothing here starts dockerd: a node has no init system, so the r9700_containers role installs
and configures Docker and says "service not started: no init system". `start()` is what an
operator of such a host does by hand (`dockerd &`); tests call it through LabInfo.start_dockerd().
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from r9700ctl.errors import CannotRun

CGROUP_ROOT = Path("/sys/fs/cgroup")
DATA_DIR = "docker"  # DIR/nodes/<node>/docker -> the node's /var/lib/docker
NODE_DATA_ROOT = "var/lib/docker"


@dataclass(frozen=True)
class Hierarchy:
    """One cgroup hierarchy of the host: where it is mounted and the lab's cgroup in it."""

    mountpoint: Path  # /sys/fs/cgroup/memory (v1) or /sys/fs/cgroup (v2)
    fstype: str  # cgroup or cgroup2
    options: str  # v1: the controllers / name=... mount options
    current: str  # the cgroup this process is in there ("/" or "/a/b")

    def node_cgroup(self, netns: str) -> Path:
        return self.mountpoint / self.current.lstrip("/") / f"r9700ctl-{netns}"

    @property
    def relative(self) -> str:
        """Where the node mounts it, below its /sys/fs/cgroup ("" = /sys/fs/cgroup itself)."""
        return "" if self.mountpoint == CGROUP_ROOT else str(self.mountpoint.relative_to(CGROUP_ROOT))


def hierarchies(mountinfo: str | None = None, own_cgroups: str | None = None) -> list[Hierarchy]:
    """The host's cgroup mounts under /sys/fs/cgroup, each with this process's cgroup in it."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    if own_cgroups is None:
        own_cgroups = Path("/proc/self/cgroup").read_text()
    current: dict[str, str] = {}
    for line in own_cgroups.splitlines():
        _, controllers, path = line.split(":", 2)
        current[controllers] = path
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mountpoint = Path(fields[4])
        if mountpoint != CGROUP_ROOT and CGROUP_ROOT not in mountpoint.parents:
            continue
        if tail[0] == "cgroup2":
            found.append(Hierarchy(mountpoint, "cgroup2", "", current.get("", "/")))
            continue
        # Mounted again with the host's own options (a v1 hierarchy refuses other ones); matched to
        # /proc/self/cgroup by its controllers (or name=), which are among those options.
        options = [o for o in tail[2].split(",") if o not in ("rw", "ro")]
        path = next((p for c, p in current.items() if c and set(c.split(",")) <= set(options)), "/")
        found.append(Hierarchy(mountpoint, "cgroup", ",".join(options), path))
    return found


def enter_node_cgroups(netns: str, argv: list[str]) -> list[str]:
    """argv run from inside the node's own cgroups (created here), so its cgroup namespace roots there."""
    lines = []
    for h in hierarchies():
        cg = shlex.quote(str(h.node_cgroup(netns)))
        lines.append(f"mkdir -p {cg}")
        if h.fstype == "cgroup" and "cpuset" in h.options.split(","):
            # A new v1 cpuset has no CPUs or memory nodes: no process could join it.
            parent = shlex.quote(str(h.node_cgroup(netns).parent))
            lines.append(f"cat {parent}/cpuset.cpus > {cg}/cpuset.cpus")
            lines.append(f"cat {parent}/cpuset.mems > {cg}/cpuset.mems")
        lines.append(f"echo $$ > {cg}/cgroup.procs")
    script = "set -e\n" + "\n".join(lines) + '\nexec "$@"\n'
    return ["/bin/sh", "-c", script, "r9700ctl-node", *argv]


def init_lines(node_dir: Path) -> str:
    """Shell lines for the node's init (before chroot, $R = its root): cgroups, data root, net sysctls."""
    data = shlex.quote(str(node_dir / DATA_DIR))
    lines = [
        "# dockerd's needs (r9700ctl/lab/dockerd.py): cgroups in the node's cgroup namespace,",
        "# a data root that is not overlayfs, the node's own network sysctls writable.",
        'mount -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup_root "$R/sys/fs/cgroup"',
    ]
    for h in hierarchies():
        target = f'"$R/sys/fs/cgroup/{h.relative}"' if h.relative else '"$R/sys/fs/cgroup"'
        if h.fstype == "cgroup2":
            lines += [f"mkdir -p {target}", f"mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 {target}"]
        else:
            lines += [
                f"mkdir -p {target}",
                f"mount -t cgroup -o nosuid,nodev,noexec,{h.options} cgroup {target}",
            ]
    lines += [
        f'mkdir -p {data} "$R/{NODE_DATA_ROOT}"',
        f'mount --bind {data} "$R/{NODE_DATA_ROOT}"',
        'mount --bind "$R/proc/sys/net" "$R/proc/sys/net"',
        'mount -o remount,bind,rw "$R/proc/sys/net"',
    ]
    return "\n".join(lines)


def node_cgroups(netns: str) -> list[str]:
    """The node's cgroups (recorded in lab.json: `lab down` may run in another cgroup than `up`)."""
    return [str(h.node_cgroup(netns)) for h in hierarchies()]


def remove_cgroups(cgroups: list[str]) -> list[str]:
    """rmdir the node's cgroups (deepest first) once its processes are gone; returns what is left."""
    left = []
    for name in cgroups:
        top = Path(name)
        if not top.is_dir():
            continue
        below = sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: len(p.parts), reverse=True)
        for directory in below:
            for _ in range(50):  # a cgroup whose last process just exited may still be busy briefly
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
        if top.exists():
            left.append(f"cgroup {top}")
    return left


START = (
    "set -e; if docker info >/dev/null 2>&1; then exit 0; fi; "
    "command -v dockerd >/dev/null || "
    "{ echo 'dockerd is not installed (provision the node first)' >&2; exit 3; }; "
    "setsid /usr/sbin/dockerd >/var/log/dockerd.log 2>&1 < /dev/null & "
    "for i in $(seq 1 120); do docker info >/dev/null 2>&1 && exit 0; sleep 0.5; done; "
    "tail -n 3 /var/log/dockerd.log >&2; exit 1"
)


def start_command() -> str:
    """The shell command (as root on the node) that starts dockerd and waits until it answers."""
    return f"sh -c {shlex.quote(START)}"


def require_started(name: str, returncode: int, stderr: str) -> None:
    if returncode != 0:
        raise CannotRun(
            what=f"{name}: dockerd did not start: {stderr.strip().splitlines()[-1:] or 'no output'}"
        )
