"""Before the lab touches anything: are we root, and are the host tools there?"""

from __future__ import annotations

import os
import shutil
import sys

from r9700ctl.errors import CannotRun

# executable -> the Debian package that ships it (named in the one-line fix).
HOST_TOOLS = {
    "debootstrap": "debootstrap",
    "apt-cacher-ng": "apt-cacher-ng",
    "zstd": "zstd",
    "tar": "tar",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "mount": "mount",
    "umount": "mount",
    "chroot": "coreutils",
    "gpg": "gnupg",
    "gpgv": "gpgv",  # checks Debian's InRelease before the lab cuts its index (debian_subset.py)
    "gpgconf": "gnupg",
    "docker-registry": "docker-registry",
    "tc": "iproute2",
}
# What `lab up --cluster-network` needs besides: nft plants the firewall-drop fault.
CLUSTER_TOOLS = {"nft": "nftables"}
# apt-cacher-ng and chroot live in sbin, which a sudo-less PATH may lack.
EXTRA_PATH = "/usr/local/sbin:/usr/sbin:/sbin"


def require_root(command: str) -> None:
    if os.geteuid() != 0:
        raise CannotRun(
            what=f"'r9700ctl {command}' needs root: it creates network namespaces, mounts and daemons",
            hint=f"run it as root: sudo r9700ctl {command}"
            if _on_roots_path()
            else "run it as root by its full path, as sudo's PATH does not hold your virtual environment: "
            f"sudo {this_program()} {command}",
        )


def this_program() -> str:
    """How to start this very r9700ctl again, as an absolute command (a venv is not on root's PATH)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0.endswith("__main__.py") or not argv0:
        return f"{sys.executable} -m r9700ctl"
    return os.path.abspath(argv0) if os.sep in argv0 else (shutil.which(argv0) or argv0)


def _on_roots_path() -> bool:
    """Whether plain `sudo r9700ctl` finds this r9700ctl (sudo's usual secure_path)."""
    secure_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    found = shutil.which("r9700ctl", path=secure_path)
    return found is not None and os.path.realpath(found) == os.path.realpath(this_program().split()[0])


def which(tool: str) -> str | None:
    path = os.environ.get("PATH", "") + os.pathsep + EXTRA_PATH
    return shutil.which(tool, path=path)


def missing_tools(tools: dict[str, str] | None = None) -> dict[str, str]:
    """Tools (with their package) that are not installed."""
    return {tool: pkg for tool, pkg in (tools or HOST_TOOLS).items() if which(tool) is None}


def require_tools(cluster: bool = False) -> None:
    missing = missing_tools({**HOST_TOOLS, **CLUSTER_TOOLS} if cluster else HOST_TOOLS)
    if missing:
        packages = " ".join(sorted(set(missing.values())))
        raise CannotRun(
            what=f"the lab needs host tools that are missing: {', '.join(sorted(missing))}",
            hint=f"install them: apt-get install -y {packages}",
        )


def tool(name: str) -> str:
    """Absolute path of a host tool (require_tools() ran first)."""
    path = which(name)
    if path is None:
        raise CannotRun(
            what=f"{name} is not installed",
            hint=f"apt-get install -y {({**HOST_TOOLS, **CLUSTER_TOOLS}).get(name, name)}",
        )
    return path
