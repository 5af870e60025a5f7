"""The nodes' Debian 12 root file system: debootstrap once, then a cached .tar.zst.

The cache lives in /var/cache/r9700ctl/lab/ (R9700CTL_LAB_CACHE overrides it) and is keyed by a
hash of the package list and of prepare_base()'s source, so changing either rebuilds it: the
tarball, and next to it the extracted tree that the nodes' overlays share as their lower layer.
A cold build takes about a minute (debootstrap); restoring the tarball takes seconds.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from r9700ctl.errors import CannotRun
from r9700ctl.lab import locks, processes
from r9700ctl.lab.hostcheck import tool

SUITE = "bookworm"
PACKAGES = (
    "openssh-server",
    "python3",
    "sudo",
    "python3-apt",
    "python3-debian",
    "gnupg",
    "ca-certificates",
    "iproute2",
)
LAB_USER = "r9700"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_CACHE = "/var/cache/r9700ctl/lab"

SSHD_DROP_IN = """\
# r9700ctl lab plumbing: keys only, one host key (written per node), many parallel sessions.
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
MaxStartups 100:30:200
MaxSessions 50
HostKey /etc/ssh/ssh_host_ed25519_key
"""

POLICY_RC_D = """\
#!/bin/sh
# r9700ctl lab plumbing: a lab node has no init system, so no package may start a daemon.
exit 101
"""


def cache_dir() -> Path:
    return Path(os.environ.get("R9700CTL_LAB_CACHE") or DEFAULT_CACHE)


def cache_key() -> str:
    """Changes whenever the package list or the preparation code changes."""
    digest = hashlib.sha256()
    digest.update(SUITE.encode())
    digest.update(",".join(PACKAGES).encode())
    for source in (inspect.getsource(prepare_base), SSHD_DROP_IN, POLICY_RC_D):
        digest.update(source.encode())
    return digest.hexdigest()[:12]


def cache_path() -> Path:
    return cache_dir() / f"rootfs-{SUITE}-{cache_key()}.tar.zst"


def debian_mirror(host_root: Path = Path("/")) -> str:
    """The Debian mirror the host itself uses (deb822 sources first, then sources.list)."""
    candidates: list[str] = []
    sources_d = host_root / "etc/apt/sources.list.d"
    for path in sorted(sources_d.glob("*.sources")) if sources_d.is_dir() else []:
        candidates += _deb822_uris(path.read_text(errors="replace"))
    legacy = [host_root / "etc/apt/sources.list"]
    legacy += sorted(sources_d.glob("*.list")) if sources_d.is_dir() else []
    for path in legacy:
        if path.is_file():
            candidates += _one_line_uris(path.read_text(errors="replace"))
    for uri in candidates:
        if _is_debian_archive(uri):
            return uri.rstrip("/")
    return DEFAULT_MIRROR


def _deb822_uris(text: str) -> list[str]:
    uris = []
    for stanza in re.split(r"\n\s*\n", text):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
            uris += fields.get("uris", "").split()
    return uris


def _one_line_uris(text: str) -> list[str]:
    uris = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options: [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if words:
            uris.append(words[0])
    return uris


def _is_debian_archive(uri: str) -> bool:
    """The main archive, not debian-security, not an Ubuntu or third-party repository."""
    path = uri.split("://", 1)[-1]
    return uri.startswith(("http://", "https://")) and path.rstrip("/").endswith("/debian")


def prepare_base(root: Path) -> None:
    """Generic preparation, baked into the cache (per-node files are written by node.py)."""
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # every node gets its own host key
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text(POLICY_RC_D)
    policy.chmod(0o755)
    (root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/ssh/sshd_config.d/r9700ctl-lab.conf").write_text(SSHD_DROP_IN)
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    if f"\n{LAB_USER}:" not in "\n" + (root / "etc/passwd").read_text():
        processes.run(
            [tool("chroot"), str(root), "useradd", "--create-home", "--shell", "/bin/bash", LAB_USER],
            what="create the lab user",
        )
    sudoers = root / f"etc/sudoers.d/{LAB_USER}"
    sudoers.write_text(
        f"# r9700ctl lab: passwordless sudo for the SSH user\n{LAB_USER} ALL=(ALL) NOPASSWD:ALL\n"
    )
    sudoers.chmod(0o440)


def base_path() -> Path:
    """The extracted root file system every lab's node overlays use as their read-only lower layer."""
    return cache_dir() / f"rootfs-{SUITE}-{cache_key()}"


def ensure_base(mirror: str, log: Path, progress: Callable[[str], None]) -> Path:
    """The prepared root file system, built or restored once per host; returns its directory.

    Labs share it read-only (overlayfs never writes to a lower layer), so a warm `lab up` copies
    nothing. Both the directory and the .tar.zst appear by rename, so their presence means done.
    """
    base, cache = base_path(), cache_path()
    if base.is_dir():
        progress(f"root file system: cached in {base}")
        return base
    built: list[str] = []

    def build(work: Path) -> None:
        if cache.is_file():
            _extract(cache, work)
            built.append(f"root file system restored from {cache}")
            return
        progress(f"no cached root file system: debootstrap {SUITE} from {mirror} (about a minute)")
        _debootstrap(work, mirror, log)
        prepare_base(work)
        _pack(work, cache)
        built.append(f"root file system built and cached in {cache} ({cache.stat().st_size // 2**20} MiB)")

    # One builder at a time: a parallel `lab up` waits, then uses what this one made.
    locks.build_once(base, cache.with_suffix(".lock"), build)
    for line in built:
        progress(line)
    return base


def _debootstrap(target: Path, mirror: str, log: Path) -> None:
    argv = [
        tool("debootstrap"),
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(target),
        mirror,
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        try:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=1800, check=False)
        except subprocess.TimeoutExpired as exc:
            raise CannotRun(what=f"debootstrap did not finish in 30 minutes (log: {log})") from exc
    if proc.returncode != 0:
        raise CannotRun(
            what=f"debootstrap {SUITE} from {mirror} failed: {processes.tail(log, 2)}",
            hint=f"check that the host reaches {mirror}; full log: {log}",
        )


def _pack(root: Path, cache: Path) -> None:
    tmp = cache.with_name(cache.name + ".tmp")
    processes.run(
        [tool("tar"), "--numeric-owner", "-C", str(root), "-I", "zstd -T0 -3", "-cf", str(tmp), "."],
        what="pack the root file system",
        timeout=600,
    )
    os.replace(tmp, cache)


def _extract(cache: Path, target: Path) -> None:
    processes.run(
        [tool("tar"), "--numeric-owner", "-C", str(target), "-I", "zstd", "-xf", str(cache)],
        what=f"restore the root file system from {cache}",
        timeout=600,
    )
