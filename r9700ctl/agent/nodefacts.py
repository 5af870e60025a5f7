"""Raw facts about one node, gathered ON the node with the standard library only.

It runs before anything of r9700ctl is on the node: r9700ctl.agentpack.stdin_invocation sends
it on stdin (``python3 - ARGS``) together with the node-package modules it imports (sysfs.py,
schemas.py), held in memory; ARGS is one base64-encoded JSON object (`encode_args`). It prints
one JSON document on stdout and always exits 0, putting what it could not read into ``errors``.
It judges nothing: r9700ctl/preflight/ does that on the controller, for the provisioning role
(r9700_preflight) and for ``r9700ctl doctor`` alike.

Arguments (all optional):
  root             file-system root to read (tests pass a fake tree); commands run only when "/"
  apt_update       run `apt-get update` before asking apt for candidates (needs root)
  apt_max_age_s    skip it when preflight refreshed the lists less than this many seconds ago
                   and /etc/apt has not changed since (0, the default: always refresh)
  lock_wait_s      wait up to this many seconds for dpkg/apt locks to be released
  packages         package names whose installed version to report (dpkg-query)
  env_users        users whose shell start files to read for environment variables (root, ...)
  env_names        the variables to report from the node's environment sources (GOVERNED_DEFAULT)
  converged        the converged step's check arguments (r9700ctl/agent/converged.py): its answer
                   is reported as "converged", so the step needs no node call of its own

Facts are read, never changed: the only side effect is `apt-get update` refreshing
/var/lib/apt/lists when asked, with preflight's mark of when it did (nothing under /etc).
"""

from __future__ import annotations

import base64
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas, sysfs

SCHEMA = schemas.NODEFACTS

# The files dpkg and apt lock; a process holding one open blocks every install.
LOCK_FILES = (
    "/var/lib/dpkg/lock-frontend",
    "/var/lib/dpkg/lock",
    "/var/lib/apt/lists/lock",
    "/var/cache/apt/archives/lock",
)

# UEFI global variable GUID; the 5th byte of the SecureBoot variable is its value.
SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

DEFAULT_PACKAGES = ("amdgpu-dkms", "rocm-core", "rocm", "rocminfo", "amd-smi-lib", "dkms")

# A command runner: argv -> (exit code, stdout text), or None when the program is missing.
Runner = Callable[[list[str], float], "tuple[int, str] | None"]


def run_command(argv: list[str], timeout: float = 60.0) -> tuple[int, str] | None:
    """Run argv with a C locale; None when the program does not exist."""
    if shutil.which(argv[0]) is None:
        return None
    env = dict(os.environ, LC_ALL="C", LANG="C", DEBIAN_FRONTEND="noninteractive")
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 124, f"{type(exc).__name__}: {exc}"
    return proc.returncode, proc.stdout + proc.stderr


def no_commands(argv: list[str], timeout: float = 60.0) -> tuple[int, str] | None:
    """The runner for a fake root: no program exists there."""
    return None


def _path(root: str, absolute: str) -> str:
    return os.path.join(root, absolute.lstrip("/"))


def _read(root: str, absolute: str) -> str | None:
    try:
        with open(_path(root, absolute), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def read_os_release(root: str) -> dict[str, str]:
    text = _read(root, "/etc/os-release") or _read(root, "/usr/lib/os-release") or ""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            values[key.strip()] = value.strip().strip('"').strip("'")
    os_id = values.get("ID", "").lower()
    version_id = values.get("VERSION_ID", "")
    return {
        "id": os_id,
        "version_id": version_id,
        "codename": values.get("VERSION_CODENAME", ""),
        "pretty_name": values.get("PRETTY_NAME", ""),
        "key": f"{os_id}-{version_id}" if os_id and version_id else "",
    }


def bar_facts(root: str, address: str) -> list[dict[str, Any]]:
    """The memory BARs of a device (r9700ctl.agent.sysfs.read_bars), sizes in bytes, as facts."""
    bars = sysfs.read_bars(Path(root), address)
    return [
        {"index": b.index, "size": b.size, "memory": True, "prefetch": b.prefetchable, "mem64": b.is_64bit}
        for b in bars
    ]


def acs_fact(read: sysfs.AcsRead) -> dict[str, Any]:
    """A bridge's ACS as the `p2p` facts carry it: its capability and control words, or the error."""
    if read.error:
        return {"error": read.error}
    return {"capability": read.capability, "control": read.control}


def read_p2p(root: str, addresses: list[str]) -> dict[str, Any]:
    """What PCIe peer-to-peer depends on, per GPU: BARs, VRAM, IOMMU group type, bridge path + ACS
    (each read by agent/sysfs.py, as the agent's platform checks read them)."""
    top = Path(root)
    gpus: dict[str, Any] = {}
    bridges: dict[str, Any] = {}
    for address in addresses:
        if not sysfs.device_dir(top, address).is_dir():
            continue
        path = [*sysfs.bridge_chain(top, address), address]
        group = sysfs.iommu_group(top, address)
        gpus[address] = {
            "bars": bar_facts(root, address),
            "vram_bytes": sysfs.vram_total_bytes(top, address),
            "iommu_group": group,
            "iommu_type": (sysfs.iommu_group_type(top, address) or None) if group is not None else None,
            "path": path,
        }
        for bridge in path[:-1]:
            if bridge not in bridges:
                bridges[bridge] = acs_fact(sysfs.read_acs(top, bridge))
    return {"source": "sysfs", "gpus": gpus, "bridges": bridges}


def parse_apt_policy(text: str) -> dict[str, dict[str, str | None]]:
    """`apt-cache policy a b` -> {a: {"installed": ver|None, "candidate": ver|None}}."""
    result: dict[str, dict[str, str | None]] = {}
    current = None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            current = line.rstrip()[:-1]
            result[current] = {"installed": None, "candidate": None}
            continue
        stripped = line.strip()
        if current is None:
            continue
        for key in ("Installed", "Candidate"):
            if stripped.startswith(f"{key}:"):
                value = stripped.split(":", 1)[1].strip()
                result[current][key.lower()] = None if value in ("(none)", "") else value
    return result


def apt_candidates(run: Runner, packages: list[str]) -> dict[str, Any]:
    out = run(["apt-cache", "policy", *packages], 120.0)
    if out is None:
        return {"available": False, "packages": {}}
    policies = parse_apt_policy(out[1])
    errors = [line for line in out[1].splitlines() if line.startswith("E:")]
    return {
        "available": True,
        # apt-cache stops at a broken source ("E: Conflicting values set for option Signed-By ...").
        "error": (errors[0] if errors else f"apt-cache exited {out[0]}") if out[0] != 0 else "",
        "packages": {name: policies.get(name, {"installed": None, "candidate": None}) for name in packages},
    }


def free_bytes(root: str, absolute: str) -> int | None:
    try:
        st = os.statvfs(_path(root, absolute))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def read_secure_boot(root: str, run: Runner) -> dict[str, str]:
    if not os.path.isdir(_path(root, "/sys/firmware/efi")):
        return {"state": "not_efi", "source": "sysfs", "detail": "no /sys/firmware/efi: booted without UEFI"}
    out = run(["mokutil", "--sb-state"], 30.0)
    if out is not None:
        text = out[1].strip()
        lowered = text.lower()
        if "secureboot enabled" in lowered:
            return {"state": "enabled", "source": "mokutil", "detail": text}
        if "secureboot disabled" in lowered:
            return {"state": "disabled", "source": "mokutil", "detail": text}
    try:
        with open(_path(root, "/" + SECURE_BOOT_VAR), "rb") as fh:
            data = fh.read()
    except OSError:
        return {
            "state": "unknown",
            "source": "none",
            "detail": "mokutil missing and SecureBoot efivar unreadable",
        }
    if len(data) >= 5:
        state = "enabled" if data[4] == 1 else "disabled"
        return {"state": state, "source": "efivars", "detail": f"SecureBoot efivar value {data[4]}"}
    return {"state": "unknown", "source": "efivars", "detail": "SecureBoot efivar too short"}


# Where DKMS signs modules, as dkms's prepare_mok() decides (https://github.com/dkms-project/dkms,
# dkms.in and README.md "Module signing"): mok_signing_key / mok_certificate from
# /etc/dkms/framework.conf and framework.conf.d/*.conf; unset on Ubuntu, the MOK of Ubuntu's
# shim-signed (update-secureboot-policy --new-key makes it); elsewhere (Debian,
# https://wiki.debian.org/SecureBoot#DKMS_and_secure_boot) /var/lib/dkms/mok.key and mok.pub, which
# dkms creates itself when they are missing.
UBUNTU_MOK = ("/var/lib/shim-signed/mok/MOK.priv", "/var/lib/shim-signed/mok/MOK.der")
DKMS_MOK = ("/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub")
# mokutil --test-key's answers (https://github.com/lcp/mokutil, src/mokutil.c test_key).
MOKUTIL_STATES = (
    ("is already enrolled", "enrolled"),
    ("is already in db", "enrolled"),
    ("is already in the built-in trusted keyring", "enrolled"),
    ("is already in the enrollment request", "pending"),
    ("is blocked in", "blocked"),
    ("is not enrolled", "not_enrolled"),
)


def read_framework_conf(root: str) -> dict[str, tuple[str, str]]:
    """NAME -> (value, file) from dkms's framework.conf and framework.conf.d/*.conf (later files win)."""
    files = ["/etc/dkms/framework.conf"]
    conf_dir = _path(root, "/etc/dkms/framework.conf.d")
    if os.path.isdir(conf_dir):
        files += [
            f"/etc/dkms/framework.conf.d/{n}" for n in sorted(os.listdir(conf_dir)) if n.endswith(".conf")
        ]
    settings: dict[str, tuple[str, str]] = {}
    for conf in files:
        for line in (_read(root, conf) or "").splitlines():
            key, sep, value = line.strip().partition("=")
            value = value.strip().strip('"').strip("'")
            if sep and key and not key.startswith("#") and value:
                settings[key.strip()] = (value, conf)
    return settings


def read_dkms_signing(root: str, os_id: str, kernel: str, run: Runner) -> dict[str, Any]:
    """The key and certificate DKMS will sign amdgpu with, whether they exist and are enrolled."""
    settings = read_framework_conf(root)
    key, key_from = settings.get("mok_signing_key", ("", ""))
    cert, cert_from = settings.get("mok_certificate", ("", ""))
    if not key and os_id == "ubuntu":
        (key, cert), origin = UBUNTU_MOK, "dkms's default on Ubuntu: the MOK of shim-signed"
    else:
        origin = f"mok_signing_key in {key_from}" if key else "dkms's default: its own MOK in /var/lib/dkms"
        key = key or DKMS_MOK[0]
        cert = cert or DKMS_MOK[1]
        if cert_from:
            origin += f", mok_certificate in {cert_from}"
    key, cert = (p.replace("${kernelver}", kernel).replace("$kernelver", kernel) for p in (key, cert))
    facts: dict[str, Any] = {
        "key": key,
        "certificate": cert,
        "origin": origin,
        "key_exists": key.startswith("pkcs11:") or os.path.isfile(_path(root, key)),
        "certificate_exists": os.path.isfile(_path(root, cert)),
        "enrolled": None,
        "mokutil": "",
    }
    if facts["certificate_exists"]:
        out = run(["mokutil", "--test-key", cert], 30.0)
        if out is None:
            facts["enrolled"], facts["mokutil"] = "unknown", "mokutil not installed"
        else:
            text = out[1].strip()
            facts["mokutil"] = text.splitlines()[0] if text else f"mokutil exited {out[0]} saying nothing"
            facts["enrolled"] = next((state for said, state in MOKUTIL_STATES if said in text), "unknown")
    return facts


def find_lock_holders(root: str, own_pids: set[int]) -> list[dict[str, Any]]:
    """Processes that hold a dpkg/apt lock file open, found through /proc/*/fd (no fuser)."""
    proc = _path(root, "/proc")
    holders = []
    try:
        pids = [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return []
    for pid in sorted(pids, key=int):
        if int(pid) in own_pids:
            continue
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        held = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in LOCK_FILES:
                held.add(target)
        if held:
            cmdline = (_read(root, f"/proc/{pid}/cmdline") or "").replace("\x00", " ").strip()
            command = cmdline or (_read(root, f"/proc/{pid}/comm") or "?").strip()
            for lock in sorted(held):
                holders.append({"pid": int(pid), "command": command, "file": lock})
    return holders


def wait_for_locks(
    root: str,
    timeout_s: float,
    own_pids: set[int],
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> dict[str, Any]:
    start = clock()
    first_seen: list[dict[str, Any]] = []
    while True:
        holders = find_lock_holders(root, own_pids)
        if holders and not first_seen:
            first_seen = holders
        waited = clock() - start
        if not holders or waited >= timeout_s:
            return {
                "holders": holders,
                "seen_holders": first_seen,
                "waited_s": round(waited, 1),
                "timeout_s": timeout_s,
            }
        sleep(min(1.0, max(0.05, timeout_s - waited)))


def read_amdgpu(root: str, run: Runner) -> dict[str, Any]:
    module_dir = _path(root, "/sys/module/amdgpu")
    loaded = os.path.isdir(module_dir)
    version = (_read(root, "/sys/module/amdgpu/version") or "").strip() or None
    info: dict[str, Any] = {
        "loaded": loaded,
        "version": version,
        "modinfo_version": None,
        "modinfo_filename": None,
    }
    out = run(["modinfo", "-F", "version", "amdgpu"], 30.0)
    if out is not None and out[0] == 0:
        info["modinfo_version"] = out[1].strip() or None
    out = run(["modinfo", "-F", "filename", "amdgpu"], 30.0)
    if out is not None and out[0] == 0:
        info["modinfo_filename"] = out[1].strip() or None
    filename = info["modinfo_filename"] or ""
    # AMD's DKMS module carries a MODULE_VERSION and lands in updates/dkms; the kernel's own does not.
    info["dkms"] = bool(version) or "/updates/" in filename
    return info


def read_installed(run: Runner, packages: list[str]) -> dict[str, str | None]:
    installed: dict[str, str | None] = {name: None for name in packages}
    out = run(["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n", *packages], 60.0)
    if out is None:
        return installed
    for line in out[1].splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] in installed and parts[2].startswith("ii"):
            installed[parts[0]] = parts[1]
    return installed


def read_net(run: Runner) -> dict[str, Any]:
    """IPv4 addresses per interface (`ip -j -4 addr show`) and what the host name resolves to here:
    preflight's cluster rules (r9700ctl/cluster/netcheck.py) find the cluster NIC in them."""
    import socket

    interfaces = []
    out = run(["ip", "-j", "-4", "addr", "show"], 30.0)
    if out is not None and out[0] == 0:
        try:
            links = json.loads(out[1] or "[]")
        except ValueError:
            links = []
        for link in links if isinstance(links, list) else []:
            cidrs = [
                f"{a.get('local')}/{a.get('prefixlen')}"
                for a in link.get("addr_info") or []
                if a.get("local")
            ]
            interfaces.append({"ifname": link.get("ifname"), "addresses": cidrs})
    name = socket.gethostname()
    try:
        addresses = sorted({str(i[4][0]) for i in socket.getaddrinfo(name, None, socket.AF_INET)})
    except OSError:
        addresses = []
    return {"interfaces": interfaces, "hostname": {"name": name, "addresses": addresses}}


# The variables the environment list governs (r9700ctl/envlist.py GOVERNED; a test keeps them equal).
# Only these are reported from the files below: a start file may hold tokens that must not travel.
GOVERNED_DEFAULT = (
    "HSA_OVERRIDE_GFX_VERSION",
    "ROCR_VISIBLE_DEVICES",
    "HSA_FORCE_FINE_GRAIN_PCIE",
    "NCCL_P2P_DISABLE",
)
# Where a node sets variables for its sessions outside r9700ctl: pam_env reads /etc/environment
# (Debian's and Ubuntu's PAM session stacks, `pam_env.so readenv=1`); systemd user managers
# /etc/environment.d/*.conf (environment.d(5)); login shells /etc/profile.d/*.sh (sourced by
# /etc/profile); bash itself ~/.bash_profile, ~/.profile and ~/.bashrc (bash(1), INVOCATION).
ENV_SYSTEM_SOURCES = (("/etc/environment", ""), ("/etc/environment.d", ".conf"), ("/etc/profile.d", ".sh"))
ENV_USER_FILES = (".bash_profile", ".profile", ".bashrc")
# r9700ctl's own files (roles/r9700_env/vars/Debian.yml): their values ARE the environment list.
ENV_OWN_FILES = ("/etc/profile.d/r9700.sh", "/etc/environment.d/90-r9700.conf")
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def _assigned_value(text: str) -> str:
    """The value of `NAME=value` as the shell or pam_env reads it: quotes removed, a trailing comment cut."""
    text = text.strip()
    if text[:1] in ("'", '"'):
        end = text.find(text[0], 1)
        return text[1:end] if end > 0 else text[1:]
    return text.split()[0] if text else ""


def _home_directories(root: str, users: list[str]) -> dict[str, str | None]:
    homes: dict[str, str | None] = {user: None for user in users}
    for line in (_read(root, "/etc/passwd") or "").splitlines():
        fields = line.split(":")
        if len(fields) >= 6 and fields[0] in homes:
            homes[fields[0]] = fields[5]
    return homes


def read_environment_sources(root: str, users: list[str], names: list[str]) -> dict[str, Any]:
    """Lines of the node's own environment files that set one of `names`: file, line, name, value.

    Read, never judged (r9700ctl/nodeenv.py judges). A line is a plain assignment as pam_env or a
    shell reads it (`NAME=value`, `export NAME=value`); commented lines are not settings.
    """
    files: list[str] = []
    for path, suffix in ENV_SYSTEM_SOURCES:
        if not suffix:
            files.append(path)
            continue
        try:
            entries = sorted(os.listdir(_path(root, path)))
        except OSError:
            continue
        files += [f"{path}/{name}" for name in entries if name.endswith(suffix)]
    homes = _home_directories(root, users)
    for home in dict.fromkeys(h for h in homes.values() if h):
        files += [f"{home.rstrip('/')}/{name}" for name in ENV_USER_FILES]
    wanted = set(names)
    found: dict[str, Any] = {"read": [], "settings": [], "errors": [], "users": homes}
    for path in files:
        try:
            if path in ENV_OWN_FILES or not stat.S_ISREG(os.stat(_path(root, path)).st_mode):
                continue
        except FileNotFoundError:
            continue
        except OSError as exc:  # a home this user may not enter (0750 on Ubuntu): said, not passed
            found["errors"].append(f"{path}: {exc.strerror}")
            continue
        try:
            with open(_path(root, path), encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError as exc:
            found["errors"].append(f"{path}: {exc.strerror}")
            continue
        found["read"].append(path)
        for number, line in enumerate(lines, start=1):
            match = _ASSIGNMENT.match(line)
            if match and match.group(1) in wanted:
                found["settings"].append(
                    {
                        "path": path,
                        "line": number,
                        "name": match.group(1),
                        "value": _assigned_value(match.group(2)),
                        "text": line.strip(),
                    }
                )
    return found


def service_manager(root: str) -> str:
    if os.path.isdir(_path(root, "/run/systemd/system")):
        return "systemd"
    comm = (_read(root, "/proc/1/comm") or "").strip()
    return comm or "unknown"


# Preflight's mark of its last clean `apt-get update`, in apt's lists directory: apt-get update
# deletes the files of that directory it does not know (pkgAcquire::Clean, run by ListUpdate when no
# index failed and APT::Get::List-Cleanup is on, the default: apt 2.4 and 2.7, apt-pkg/update.cc and
# apt-pkg/acquire.cc; seen on Debian 12: a file touched there is gone after the next update), so a
# refresh by anyone else removes the mark and the next preflight refreshes again. Where the mark
# survives (List-Cleanup off, a failed index), the other update left the lists as new or newer.
# Only /var/lib/apt/lists changes, as before.
APT_REFRESHED = "/var/lib/apt/lists/r9700ctl-refreshed"
# What apt reads its sources, pins, keys and settings from: a change there since the mark means
# the lists may not be what apt would fetch now.
APT_CONFIG = "/etc/apt"


def _changed_since(path: str, when: float) -> bool:
    """Whether path (and, for a link, what it points to) was written or replaced after `when`: the
    later of mtime and ctime, as `cp -p` and `rsync -t` keep an old mtime but not the ctime."""
    for read in (os.lstat, os.stat):
        try:
            info = read(path)
        except OSError:
            continue
        if max(info.st_mtime, info.st_ctime) > when:
            return True
    return False


def apt_lists_age(root: str, now: Callable[[], float] = time.time) -> float | None:
    """Seconds since preflight last refreshed apt's lists; None when it never did (that apt-get
    update knows of), when anything under /etc/apt changed since, or when the mark lies in the future
    (a clock set back: its age says nothing)."""
    try:
        refreshed = os.stat(_path(root, APT_REFRESHED)).st_mtime
    except OSError:
        return None
    if refreshed > now():
        return None
    # followlinks: a linked sources.list.d is walked as apt reads it
    for directory, _dirs, files in os.walk(_path(root, APT_CONFIG), followlinks=True):
        for path in (directory, *(os.path.join(directory, name) for name in files)):
            if _changed_since(path, refreshed):
                return None
    return now() - refreshed


def refresh_apt_lists(
    root: str, run: Runner, max_age_s: float, now: Callable[[], float] = time.time
) -> dict[str, Any]:
    """`apt-get update`, unless preflight refreshed the lists less than max_age_s ago and /etc/apt has
    not changed since (r9700_preflight_apt_cache_valid_time; 0 refreshes every time)."""
    age = apt_lists_age(root, now) if max_age_s > 0 else None
    if age is not None and age < max_age_s:
        return {
            "ran": False,
            "ok": None,
            "age_s": round(age),
            "detail": f"apt's lists were refreshed {age:.0f} s ago and /etc/apt has not changed since "
            f"(r9700_preflight_apt_cache_valid_time: {max_age_s:.0f} s)",
        }
    started = now()  # a change to /etc/apt while apt-get runs is newer than the mark
    out = run(["apt-get", "update", "-qq"], 600.0)
    if out is None:
        return {"ran": False, "ok": False, "detail": "apt-get not found"}
    lines = out[1].strip().splitlines()
    # Marked only when clean: apt-get update exits 0 when an index failed to download ("W: Failed to
    # fetch ...", "W: Some index files failed to download"); with -qq it prints nothing else.
    if out[0] == 0 and not any(line.startswith(("W:", "E:", "Err:")) for line in lines):
        try:
            mark = Path(_path(root, APT_REFRESHED))
            mark.touch()
            os.utime(mark, (started, started))
        except OSError:
            pass  # no mark: the next preflight refreshes again
    return {"ran": True, "ok": out[0] == 0, "detail": (lines[-1:] or [""])[0]}


def gather(
    args: dict[str, Any] | None = None,
    run: Runner | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """All raw facts as one JSON-ready dict; never raises for a missing file or program."""
    args = dict(args or {})
    root = str(args.get("root") or "/")
    if run is None:
        run = run_command if root == "/" else no_commands
    errors: list[str] = []
    uname = platform.uname()
    kernel = (_read(root, "/proc/sys/kernel/osrelease") or "").strip() if root != "/" else uname.release
    facts: dict[str, Any] = {
        "schema": SCHEMA,
        "root": root,
        "os": read_os_release(root),
        "kernel": kernel,
        "arch": uname.machine,
        "is_root": os.geteuid() == 0,
        "python": platform.python_version(),
        "service_manager": service_manager(root),
        "errors": errors,
    }
    if not facts["os"]["key"]:
        errors.append("could not read ID/VERSION_ID from /etc/os-release")

    facts["pci"] = {"source": "sysfs", "devices": sysfs.display_devices(Path(root))}

    own = {os.getpid(), os.getppid()}
    facts["apt_lock"] = wait_for_locks(root, float(args.get("lock_wait_s") or 0), own, sleep, clock)

    facts["apt_update"] = {"ran": False, "ok": None, "detail": ""}
    if args.get("apt_update") and not facts["apt_lock"]["holders"]:
        if facts["is_root"] and root == "/":
            facts["apt_update"] = refresh_apt_lists(root, run, float(args.get("apt_max_age_s") or 0))
        else:
            facts["apt_update"]["detail"] = "not root: apt lists not refreshed"

    headers = f"linux-headers-{kernel}"
    extra = f"linux-modules-extra-{kernel}"
    facts["apt"] = apt_candidates(run, [headers, extra])
    facts["apt"]["headers_package"] = headers
    facts["apt"]["modules_extra_package"] = extra

    amd = [d["address"] for d in facts["pci"]["devices"] if d.get("vendor") == "0x1002"]
    facts["p2p"] = read_p2p(root, amd)

    facts["disk"] = {"/": free_bytes(root, "/"), "/var": free_bytes(root, "/var")}
    facts["secure_boot"] = read_secure_boot(root, run)
    facts["dkms_signing"] = read_dkms_signing(root, facts["os"]["id"], kernel, run)
    facts["amdgpu"] = read_amdgpu(root, run)
    facts["packages"] = read_installed(run, list(args.get("packages") or DEFAULT_PACKAGES))
    facts["net"] = read_net(run) if root == "/" else {}
    facts["net"]["epoch_s"] = time.time()  # the node's clock, held to the controller's by preflight
    facts["environment_sources"] = read_environment_sources(
        root,
        [str(u) for u in args.get("env_users") or ["root"]],
        [str(n) for n in args.get("env_names") or GOVERNED_DEFAULT],
    )
    return facts


def encode_args(args: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(args, sort_keys=True).encode()).decode()


def decode_args(text: str) -> dict[str, Any]:
    return json.loads(base64.b64decode(text.encode()).decode()) if text else {}


def main(argv: list[str]) -> int:
    try:
        args = decode_args(argv[1] if len(argv) > 1 else "")
    except (ValueError, UnicodeDecodeError) as exc:
        args = {}
        print(json.dumps({"schema": SCHEMA, "errors": [f"bad arguments: {exc}"]}))
        return 0
    facts = gather(args)
    if isinstance(args.get("converged"), dict):
        facts["converged"] = converged_check(args["converged"])
    print(json.dumps(facts, sort_keys=True))
    return 0


def converged_check(args: dict[str, Any]) -> dict[str, Any]:
    """The converged step's node check (r9700ctl/agent/converged.py), made in preflight's node call
    after apt's lists are refreshed, as the step itself would make it: one round trip per node."""
    from r9700ctl.agent import converged

    try:
        return converged.check(args)
    except Exception as exc:  # any crash is the step's failure, never preflight's (its facts stand)
        return {"error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    sys.exit(main(sys.argv))
