"""r9700-lifecycle: the node side of r9700ctl's upgrade, rollback and uninstall (role r9700_lifecycle).

    r9700-lifecycle record-before --managed JSON [--root DIR]
    r9700-lifecycle state --new JSON [--time ISO] [--root DIR]
    r9700-lifecycle info [--root DIR]
    r9700-lifecycle uninstall --managed JSON [--dry-run] [--root DIR]
    r9700-lifecycle kernels [--running RELEASE] [--root DIR]
    r9700-lifecycle kernel-plan [--root DIR]
    r9700-lifecycle kernel-revert --before JSON [--dry-run] [--root DIR]
    r9700-lifecycle rollback-packages [--dry-run] [--root DIR]
    r9700-lifecycle release-packages --repositories JSON [--root DIR]

record-before  writes /etc/r9700ctl/before.json once, before provision changes anything: the
               packages installed and held, which managed paths existed (with a copy of each
               such file under /var/lib/r9700ctl/before/files), the members of the managed groups.
               Never overwritten: a node provisioned before this record existed says so
               ("complete": false) and uninstall then keeps every managed file it finds.
state          writes /etc/r9700ctl/state.json when its content (everything but "time") differs
               from the file there, keeping the file it replaces as state.prev.json; an unchanged
               node keeps both files byte for byte.
info           what upgrade and rollback plan from: both state files, the processes holding
               /dev/kfd, whether systemd runs, the running kernel.
uninstall      removes what provision added and before.json says was not there before:
               packages (apt-get purge), managed files (a file that existed is put back byte
               for byte), directories, group memberships and groups, package holds; reports
               the reasons a reboot is pending. --dry-run only reports.
kernels        the kernel line this node follows (the installed meta packages linux-image-<flavour>,
               e.g. linux-image-generic, linux-image-generic-hwe-24.04, linux-image-aws,
               linux-image-amd64, with their linux-headers-<flavour>), the kernels installed and
               whether each has an amdgpu module, the newest one, the held linux-* packages, the
               linux-* packages on the system with their versions, and those dpkg left
               unconfigured. A package a failed install left half-configured or unpacked counts
               as on the system.
kernel-plan    what kernel-upgrade would install, read only: `apt-get install -s` of the line's
               meta packages with the package lists the node has; the kernel it moves to.
kernel-revert  after a refused kernel-upgrade: --before is what `kernels` printed before the
               upgrade. Removes the linux-* packages installed since (the new kernel, its headers
               and modules), returns the line's meta packages to their versions then (where apt
               still has them; otherwise apt removes them with the new kernel) and holds again
               what was held, so the next boot is the running kernel; names the linux-*
               packages dpkg still has unconfigured afterwards. --dry-run only reports.
rollback-packages  during a rollback, after the roles moved the node: purges what the release
               it leaves brought (state.json's release_packages) and the state it returns to
               (state.prev.json) did not have, with the dependencies apt pulled in for them
               only, and returns what that state's release brought itself to its versions (a
               6.x amdgpu repository's mesa-amdgpu-va-drivers, which 7.x's graphics repository
               had moved on). --dry-run only reports.
release-packages  the installed packages that a release's repositories offer (--repositories:
               base_url, suite, paths, as state.json records them), read from apt's lists:
               what that release brought to this node; repositories apt has no list of are
               named in "unread".

--managed is the JSON of role r9700_lifecycle's vars (files, dirs, owned_dirs, groups,
packages). Every command prints one JSON object. Exit status: 0 done, 1 refused (the reason on
stderr and in "error"), 64 bad arguments. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys

from r9700ctl.agent import schemas

BEFORE = "etc/r9700ctl/before.json"
BACKUPS = "var/lib/r9700ctl/before/files"
STATE = "etc/r9700ctl/state.json"
STATE_PREV = "etc/r9700ctl/state.prev.json"
NODE_RECORD = "etc/r9700ctl/node.json"
DPKG_STATUS = "var/lib/dpkg/status"
APT_STATES = "var/lib/apt/extended_states"
KFD = "/dev/kfd"
SCHEMA_BEFORE = schemas.BEFORE
# Paths whose removal needs a reboot to take effect (the kernel command line, the module
# policy); the driver package is checked by name.
REBOOT_PATHS = {
    "/etc/default/grub.d/99-r9700.cfg": "kernel command line changed (GRUB drop-in removed)",
    "/etc/modprobe.d/r9700-amdgpu-blacklist.conf": "amdgpu blacklist removed",
}
DRIVER_PACKAGE = "amdgpu-dkms"


class Refused(Exception):
    pass


def at(root, path):
    return os.path.join(root, path.lstrip("/"))


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(65536), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


# --- dpkg and groups, read from their files ---------------------------------------------------


def dpkg_stanzas(root):
    """The stanzas of dpkg's status file, each a {field: value} of its unindented lines."""
    try:
        with open(at(root, DPKG_STATUS), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return []
    stanzas = []
    for stanza in text.split("\n\n"):
        lines = [line for line in stanza.splitlines() if line and not line[0].isspace() and ":" in line]
        stanzas.append({key: value.strip() for key, _, value in (line.partition(":") for line in lines)})
    return stanzas


def dpkg_packages(root):
    """{name: (want, installed)} of dpkg's status file: want is install/hold/deinstall/purge."""
    found = {}
    for fields in dpkg_stanzas(root):
        name, status = fields.get("Package"), fields.get("Status", "").split()
        if name and len(status) == 3:
            found[name] = (status[0], status[2] == "installed")
    return found


# dpkg's states of a package that is on the system, configured or not (dpkg-query(1), "Package
# states"): a hook that fails in a postinst leaves "half-configured", and what depends on that
# package stays "unpacked" (apt log in ROCm/legacy-rocm-build#3701).
PRESENT_STATES = {
    "installed",
    "unpacked",
    "half-configured",
    "half-installed",
    "triggers-awaited",
    "triggers-pending",
}


def dpkg_present(root):
    """{name: (version, state)} of the packages dpkg has on the system in any state but
    not-installed and config-files: what a failed install left counts too."""
    found = {}
    for fields in dpkg_stanzas(root):
        status = fields.get("Status", "").split()
        if fields.get("Package") and len(status) == 3 and status[2] in PRESENT_STATES:
            found[fields["Package"]] = (fields.get("Version", ""), status[2])
    return found


def installed(root):
    return sorted(name for name, (_want, done) in dpkg_packages(root).items() if done)


def held(root):
    return sorted(name for name, (want, done) in dpkg_packages(root).items() if done and want == "hold")


def auto_installed(root):
    """Packages apt marked as installed only to satisfy dependencies (extended_states)."""
    names, current = set(), None
    try:
        with open(at(root, APT_STATES), encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("Package:"):
                    current = line.split(":", 1)[1].strip()
                elif line.startswith("Auto-Installed:") and line.split(":", 1)[1].strip() == "1" and current:
                    names.add(current)
    except OSError:
        pass
    return names


def group_members(root, names):
    """{group: [members]} for the named groups that exist in /etc/group."""
    found = {}
    try:
        with open(at(root, "etc/group"), encoding="utf-8") as handle:
            for line in handle:
                parts = line.rstrip("\n").split(":")
                if len(parts) >= 4 and parts[0] in names:
                    found[parts[0]] = sorted(m for m in parts[3].split(",") if m)
    except OSError:
        pass
    return found


# --- record-before -------------------------------------------------------------------------------


def record_before(root, managed, time_text=None):
    target = at(root, BEFORE)
    if os.path.exists(target):
        return {"changed": False, "path": "/" + BEFORE}
    complete = not any(os.path.exists(at(root, p)) for p in (STATE, NODE_RECORD))
    paths = {}
    # Everything is looked at before anything is written (the backups live in an owned directory).
    for path in [*managed.get("files", []), *managed.get("dirs", []), *managed.get("owned_dirs", [])]:
        full = at(root, path)
        if os.path.islink(full):
            paths[path] = {"type": "link", "target": os.readlink(full)}
        elif os.path.isdir(full):
            paths[path] = {"type": "dir"}
        elif os.path.isfile(full):
            paths[path] = {
                "type": "file",
                "sha256": sha256(full),
                "mode": oct(os.stat(full).st_mode & 0o7777),
            }
    for path, entry in paths.items():
        if entry["type"] == "file":
            backup = at(root, os.path.join(BACKUPS, path.lstrip("/")))
            os.makedirs(os.path.dirname(backup), exist_ok=True)
            shutil.copy2(at(root, path), backup)
    record = {
        "schema": SCHEMA_BEFORE,
        "time": time_text or now_iso(),
        # False: the node was provisioned before this record existed; what was there first is unknown.
        "complete": complete,
        "packages": installed(root),
        "held": held(root),
        "paths": paths,
        "groups": group_members(root, set(managed.get("groups", []))),
    }
    write_atomic(target, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return {"changed": True, "path": "/" + BEFORE, "complete": complete}


# --- state ---------------------------------------------------------------------------------------


def without_time(document):
    return {k: v for k, v in (document or {}).items() if k != "time"}


def write_state(root, new, time_text=None):
    """state.json gets `new` plus the time when anything but the time differs; the old one is kept."""
    path, previous_path = at(root, STATE), at(root, STATE_PREV)
    old = read_json(path)
    if old is not None and without_time(old) == without_time(new):
        return {"changed": False, "rotated": False}
    if old is not None:
        shutil.copy2(path, previous_path)
    document = dict(without_time(new), time=time_text or now_iso())
    write_atomic(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
    return {"changed": True, "rotated": old is not None}


# --- info ----------------------------------------------------------------------------------------


def kfd_holders(root):
    """Processes with /dev/kfd open: [{pid, command}] (read from /proc/<pid>/fd links)."""
    holders = []
    proc = at(root, "proc")
    try:
        pids = sorted(int(p) for p in os.listdir(proc) if p.isdigit())
    except OSError:
        return holders
    for pid in pids:
        fd_dir = os.path.join(proc, str(pid), "fd")
        try:
            links = [os.readlink(os.path.join(fd_dir, fd)) for fd in os.listdir(fd_dir)]
        except OSError:
            continue
        if KFD in links:
            try:
                with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
                    command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                command = ""
            holders.append({"pid": pid, "command": command or "?"})
    return holders


def info(root):
    return {
        "changed": False,
        "state": read_json(at(root, STATE)),
        "state_prev": read_json(at(root, STATE_PREV)),
        "before": os.path.exists(at(root, BEFORE)),
        "kfd_holders": kfd_holders(root),
        # systemd(1): /run/systemd/system exists when systemd is the running init system.
        "systemd": os.path.isdir(at(root, "run/systemd/system")),
        "kernel": os.uname().release if root == "/" else "",
    }


# --- kernels -------------------------------------------------------------------------------------

# Ubuntu's and Debian's kernel packaging: linux-image-<flavour> (a meta package) depends on the
# newest linux-image-<ABI>-<flavour>, and linux-headers-<flavour> on its headers
# (https://wiki.ubuntu.com/Kernel/Dev/Meta-Pkgs: "linux-headers-<flavour> depends on the kernel
# headers package"; Debian's linux-image-amd64 and linux-headers-amd64 follow the same rule).
_KERNEL_IMAGE = re.compile(r"^linux-image-(?:unsigned-)?(\d[^ ]*)$")
# The same pattern holds the line in provision (roles/r9700_driver/vars/Debian.yml; a test keeps
# them equal): versioned images start with a digit, linux-image-extra-* is transitional.
_KERNEL_META = re.compile(r"^linux-image-(?!unsigned-|extra-|[0-9])[a-z0-9.+-]+$")


def version_key(text):
    """Sort key of a kernel release: 6.8.0-49-generic < 6.8.0-51-generic < 6.11.0-1-generic."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"[.-]", text)]


def kernels(root, running=None):
    on_system = dpkg_present(root)
    present = set(on_system)
    metas = sorted(name for name in present if _KERNEL_META.match(name))
    found = {}
    for name in present:
        match = _KERNEL_IMAGE.match(name)
        if match:
            release = match.group(1)
            modules = at(root, f"lib/modules/{release}")
            amdgpu = ""
            for base, _dirs, files in os.walk(modules):
                hits = [f for f in files if f.startswith("amdgpu.ko")]
                if hits:
                    amdgpu = os.path.join(base, hits[0])[len(root.rstrip("/")) :]
                    break
            found[release] = {
                "amdgpu_module": amdgpu,
                "headers": f"linux-headers-{release}" in present,
            }
    newest = max(found, key=version_key) if found else ""
    running = running if running is not None else (os.uname().release if root == "/" else "")
    dkms_sources = sorted(
        d[len("amdgpu-") :] for d in _listdir(at(root, "usr/src")) if d.startswith("amdgpu-")
    )
    return {
        "changed": False,
        "running": running,
        "metas": metas,
        "header_metas": [m.replace("linux-image-", "linux-headers-", 1) for m in metas],
        # linux-<flavour> (linux-generic, linux-generic-hwe-24.04), which depends on both, where installed.
        "line_metas": sorted({m.replace("linux-image-", "linux-", 1) for m in metas} & present),
        "kernels": found,
        "newest": newest,
        # The kernel a reboot would move to: the newest installed, when newer than the running one.
        "next": newest if newest and (not running or version_key(newest) > version_key(running)) else "",
        "held": [n for n in held(root) if n.startswith("linux-")],
        # amdgpu-dkms's source trees (/usr/src/amdgpu-<version>): what DKMS builds for a new kernel.
        "dkms_amdgpu": dkms_sources[-1] if dkms_sources else "",
        # What kernel-revert returns to after a refused upgrade (unconfigured packages included).
        "versions": {n: v for n, (v, _state) in sorted(on_system.items()) if n.startswith("linux-")},
        # linux-* packages dpkg has not finished configuring (what `dpkg --audit` lists).
        "unconfigured": unconfigured_kernel_packages(on_system),
    }


def unconfigured_kernel_packages(on_system):
    return sorted(
        n for n, (_v, state) in on_system.items() if n.startswith("linux-") and state != "installed"
    )


def parse_simulation(text):
    """{name: version} of the packages `apt-get install -s` would install or upgrade ("Inst" lines)."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^Inst (\S+) (?:\[[^]]*\] )?\((\S+)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def kernel_plan(root):
    found = kernels(root)
    result = {"changed": False, "running": found["running"], "metas": found["metas"], "installs": {}}
    result.update(to=found["next"], error="")
    if not found["metas"]:
        result["error"] = (
            "no kernel meta package (linux-image-<flavour>) is installed: no kernel line to follow"
        )
        return result
    if root != "/":
        return result
    # Simulation only (-s): held packages may be named, nothing changes (apt-get(8)).
    argv = ["apt-get", "install", "-s", "-q", "--allow-change-held-packages"]
    argv += [*found["line_metas"], *found["metas"], *found["header_metas"]]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=dict(os.environ, LC_ALL="C"))
    if done.returncode != 0:
        result["error"] = ((done.stderr or done.stdout).strip().splitlines() or ["apt-get failed"])[-1]
        return result
    result["installs"] = parse_simulation(done.stdout)
    new = [m.group(1) for m in map(_KERNEL_IMAGE.match, result["installs"]) if m]
    candidates = [r for r in [*new, found["next"]] if r]
    newest = max(candidates, key=version_key) if candidates else ""
    running = found["running"]
    result["to"] = newest if newest and (not running or version_key(newest) > version_key(running)) else ""
    return result


def plan_kernel_revert(before, now):
    """What kernel-revert does: `before` is the earlier `kernels` output, `now` {name: version}."""
    was = before.get("versions") or {}
    now = {n: v for n, v in now.items() if n.startswith("linux-")}
    return {
        # Installed since: the new kernel's image, headers, modules (and their common headers).
        "remove": sorted(n for n in now if n not in was),
        # Moved since: the meta packages of the line (linux-image-<flavour>, linux-headers-<flavour>).
        "restore": {n: was[n] for n in sorted(now) if n in was and now[n] != was[n]},
        "hold": sorted(n for n in before.get("held") or [] if n in was),
    }


def present_versions(root):
    return {n: v for n, (v, _state) in dpkg_present(root).items()}


def kernel_revert(root, before, dry_run):
    plan = plan_kernel_revert(before, present_versions(root))
    result = dict(plan, changed=False, dropped=[], dry_run=dry_run, apt_error="")
    if not (plan["remove"] or plan["restore"]) or dry_run or root != "/":
        result.update(next=kernels(root, before.get("running")).get("next", ""))
        result["unconfigured"] = unconfigured_kernel_packages(dpkg_present(root))
        result["said"] = said(result, before.get("running"))
        return result
    # The line's metas may be held (r9700_kernel_hold): naming them needs the flag (apt-get(8)).
    apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q", "--allow-change-held-packages"]
    metas = [f"{n}={v}" for n, v in plan["restore"].items()]
    # One transaction: the metas step back (so nothing depends on the new kernel) and the new
    # kernel's packages go ("name-" removes, apt-get(8)). dpkg removes a half-configured package
    # without configuring it first, so a hook that failed is not run again.
    done = subprocess.run(
        [*apt, "--allow-downgrades", "install", *metas, *(f"{n}-" for n in plan["remove"])],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        # The metas' old versions are gone from the repositories (Ubuntu's -updates keeps the
        # newest only): remove the new kernel anyway; apt removes the metas that need it.
        result["apt_error"] = ((done.stderr or done.stdout).strip().splitlines() or ["?"])[-1]
        run([*apt, "remove", *plan["remove"]])
    now = present_versions(root)
    result["dropped"] = sorted(n for n in plan["restore"] if n not in now)
    result["restore"] = {n: v for n, v in plan["restore"].items() if now.get(n) == v}
    hold = [n for n in plan["hold"] if n in now]
    if hold:
        run(["apt-mark", "hold", *hold])
    found = kernels(root)
    result.update(changed=True, hold=hold, next=found.get("next", ""), unconfigured=found["unconfigured"])
    result["said"] = said(result, before.get("running"))
    return result


def said(result, running):
    """One sentence for the summary: what kernel-revert did and what the next boot is."""
    parts = [f"removed {', '.join(result['remove'])}" if result["remove"] else "removed nothing"]
    if result["restore"]:
        parts.append("returned " + ", ".join(f"{n} to {v}" for n, v in result["restore"].items()))
    if result["dropped"]:
        parts.append(
            f"removed {', '.join(result['dropped'])} too (their earlier versions are not in the "
            f"repositories: {result['apt_error']}); install the line again once its kernel builds amdgpu"
        )
    if result["next"]:
        parts.append(
            f"the next boot is still {result['next']}, installed before this run: remove it or fix its build"
        )
    else:
        parts.append(f"the next boot is the running kernel {running or '(unknown)'}")
    if result.get("unconfigured") and not result.get("dry_run"):
        parts.append(
            f"dpkg still has {', '.join(result['unconfigured'])} unconfigured (dpkg --audit): remove "
            "them with apt-get remove before the next apt run"
        )
    return "; ".join(parts)


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


# --- release-packages -----------------------------------------------------------------------------

# apt names a repository's list files after its URI (apt-pkg/contrib/strutl.cc, URItoFileName):
# scheme, user and password dropped, these characters and any outside printable ASCII quoted as
# %xx, "/" turned into "_"; then "_dists_<suite>_<component>_binary-<arch>_Packages".
_APT_QUOTED = set('\\|{}[]<>"^~_=!@#$%&*')
APT_LISTS = "var/lib/apt/lists"


def apt_list_prefix(uri):
    rest = uri.split("://", 1)[-1].strip("/")
    host, _, path = rest.partition("/")
    host = host.rpartition("@")[2]
    rest = f"{host}/{path}" if path else host
    quoted = "".join(f"%{ord(c):02x}" if c in _APT_QUOTED or not 0x20 < ord(c) < 0x7F else c for c in rest)
    return quoted.replace("/", "_")


APT_HELPER = "/usr/lib/apt/apt-helper"


def list_packages(path):
    """Package names of one apt list file. apt may keep them compressed (Acquire::GzipIndexes;
    Debian's container images keep .lz4): gz and xz are read here, anything else through
    `apt-helper cat-file`, which reads every compression apt writes (apt-helper(1))."""
    openers = (("_Packages", open), (".gz", gzip.open), (".xz", lzma.open))
    opener = next((o for suffix, o in openers if path.endswith(suffix)), None)
    if opener is not None:
        with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    else:
        done = subprocess.run([APT_HELPER, "cat-file", path], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OSError(f"apt-helper cat-file {path}: {done.stderr.strip()}")
        text = done.stdout
    return {line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Package:")}


def release_packages(root, repositories):
    """The installed packages that the release's repositories offer, as apt's lists say: what the
    release brought to this node (its ROCm packages, its driver, and in 6.x as in 7.x the
    graphics packages rocdecode depends on). A repository apt has no list of is named."""
    base = str(repositories.get("base_url") or "").rstrip("/")
    suite = str(repositories.get("suite") or "")
    offered, unread = set(), []
    files = _listdir(at(root, APT_LISTS))
    for path in repositories.get("paths") or []:
        uri = f"{base}/{path.strip('/')}"
        head = f"{apt_list_prefix(uri)}_dists_{suite}_"
        lists = [f for f in files if f.startswith(head) and "_binary-" in f and "_Packages" in f]
        if not lists:
            unread.append(uri)
        for name in lists:
            try:
                offered |= list_packages(os.path.join(at(root, APT_LISTS), name))
            except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError):
                unread.append(uri)
    brought = sorted(offered & set(installed(root)))
    return {"changed": False, "packages": brought, "unread": sorted(set(unread))}


# --- rollback-packages ------------------------------------------------------------------------------


def asked(state):
    """The package names state.yml asked dpkg about when it wrote `state`."""
    names = set((state or {}).get("packages") or []) | set((state or {}).get("release_packages") or [])
    return names | set((state or {}).get("installed") or {})


def plan_rollback_packages(root):
    """What a rollback to state.prev.json does beyond the roles: purge what the release it leaves
    (state.json) brought and the one it returns to did not have, and return what that one brought
    itself to its own versions (apt keeps a newer one installed that still satisfies)."""
    target = read_json(at(root, STATE_PREV)) or {}
    leaving = read_json(at(root, STATE)) or {}
    plan = {"purge": [], "restore": {}}
    if not target.get("release_packages"):
        # Written before state.json named the release-bound packages: absence there means nothing.
        return plan
    had = target.get("installed") or {}
    now = {n: v for n, (v, state) in dpkg_present(root).items() if state == "installed"}
    # Asked about then and absent (older states asked a fixed list), or brought by the release
    # left behind: purged unless the state returned to had it installed.
    brought = asked(target) | set(leaving.get("release_packages") or [])
    plan["purge"] = sorted(n for n in brought if n in now and n not in had)
    own = sorted(target.get("release_packages") or [])
    plan["restore"] = {n: had[n] for n in own if n in now and n in had and now[n] != had[n]}
    return plan


def autoremovable(apt):
    listed = run([*apt, "-s", "autoremove"])
    return {line.split()[1] for line in listed.splitlines() if line.startswith("Remv ")}


def rollback_packages(root, dry_run):
    plan = plan_rollback_packages(root)
    result = {"changed": False, "purge": plan["purge"], "restore": plan["restore"], "dry_run": dry_run}
    result["not_restored"] = ""
    if not (plan["purge"] or plan["restore"]) or dry_run or root != "/":
        return result
    apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q"]
    if plan["restore"]:
        # The versions the older release's repositories serve (r9700_repos just configured them).
        done = subprocess.run(
            [*apt, "--allow-downgrades", "install", *(f"{n}={v}" for n, v in plan["restore"].items())],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            result["not_restored"] = ((done.stderr or done.stdout).strip().splitlines() or ["?"])[-1]
            result["restore"] = {}
        result["changed"] = True
    if plan["purge"]:
        earlier = autoremovable(apt)
        run([*apt, "purge", *plan["purge"]])
        # What apt pulled in for those packages (libdrm-amdgpu and the rest of the graphics stack),
        # and nothing autoremove would have taken before.
        extra = sorted(autoremovable(apt) - earlier)
        if extra:
            run([*apt, "purge", *extra])
        result.update(changed=True, purge=plan["purge"] + extra)
    return result


# --- uninstall -----------------------------------------------------------------------------------


def plan_uninstall(root, managed, before):
    """What uninstall does: pure reading, so --dry-run and the real run share it."""
    complete = bool(before.get("complete"))
    was = before.get("paths", {})
    before_packages = set(before.get("packages", []))
    now_installed = set(installed(root))
    plan = {"restore": [], "remove": [], "rmdir": [], "rmtree": [], "purge": [], "unhold": []}
    plan["groups"] = {"leave": {}, "delete": []}
    for path in managed.get("files", []):
        full = at(root, path)
        present = os.path.lexists(full)
        old = was.get(path)
        if old and old.get("type") == "file":
            backup = at(root, os.path.join(BACKUPS, path.lstrip("/")))
            if os.path.isfile(backup) and (
                not present or not os.path.isfile(full) or sha256(full) != old["sha256"]
            ):
                plan["restore"].append(path)
        elif old or not complete:
            continue  # there before provision (or unknown): never removed
        elif present:
            plan["remove"].append(path)
    for path in managed.get("owned_dirs", []):
        if path not in was and complete and os.path.lexists(at(root, path)):
            plan["rmtree"].append(path)
    for path in sorted(managed.get("dirs", []), key=len, reverse=True):
        if path not in was and complete and os.path.isdir(at(root, path)):
            plan["rmdir"].append(path)
    wanted = [p for p in managed.get("packages", []) if p in now_installed and p not in before_packages]
    plan["purge"] = wanted
    plan["unhold"] = [p for p in held(root) if p not in set(before.get("held", []))]
    members_before = before.get("groups", {})
    for group, members in group_members(root, set(managed.get("groups", []))).items():
        if group not in members_before:
            if complete:
                plan["groups"]["delete"].append(group)
            continue
        added = sorted(set(members) - set(members_before[group]))
        if added:
            plan["groups"]["leave"][group] = added
    reasons = []
    if DRIVER_PACKAGE in wanted:
        reasons.append(f"{DRIVER_PACKAGE} removed (the inbox amdgpu loads after a reboot)")
    for path, reason in REBOOT_PATHS.items():
        if path in plan["remove"] or path in plan["restore"]:
            reasons.append(reason)
    plan["reboot_reasons"] = reasons
    return plan


def run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Refused(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return done.stdout


def systemd_stop(root, units):
    if root != "/" or not os.path.isdir("/run/systemd/system"):
        return
    for unit in units:
        subprocess.run(["systemctl", "disable", "--now", unit], capture_output=True, check=False)


def uninstall(root, managed, dry_run):
    before = read_json(at(root, BEFORE))
    if before is None:
        raise Refused(
            "no /etc/r9700ctl/before.json: this node has no record of what existed before provision, "
            "so nothing is removed (provision it with this r9700ctl first, or remove by hand)"
        )
    plan = plan_uninstall(root, managed, before)
    changed = any(plan[k] for k in ("restore", "remove", "rmdir", "rmtree", "purge", "unhold")) or any(
        plan["groups"].values()
    )
    result = dict(plan, changed=changed, complete=bool(before.get("complete")), dry_run=dry_run)
    if dry_run or not changed:
        return result
    systemd_stop(root, managed.get("units", []))
    real = root == "/"
    env_apt = ["env", "DEBIAN_FRONTEND=noninteractive"]
    if plan["unhold"] and real:
        run(["apt-mark", "unhold", *plan["unhold"]])
    if plan["purge"] and real:
        run([*env_apt, "apt-get", "purge", "-y", "-q", *plan["purge"]])
        # Dependencies apt pulled in for provision's packages, and only those.
        leftover = run([*env_apt, "apt-get", "-s", "-q", "autoremove"])
        extra = sorted(
            {line.split()[1] for line in leftover.splitlines() if line.startswith("Remv ")}
            - set(before.get("packages", []))
        )
        if extra:
            run([*env_apt, "apt-get", "purge", "-y", "-q", *extra])
        result["purge"] = plan["purge"] + extra
    for path in plan["restore"]:
        full = at(root, path)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        shutil.copy2(at(root, os.path.join(BACKUPS, path.lstrip("/"))), full)
    for path in plan["remove"]:
        full = at(root, path)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        elif os.path.lexists(full):
            os.unlink(full)
    for group, members in plan["groups"]["leave"].items():
        for member in members:
            if real:
                run(["gpasswd", "-d", member, group])
    if real:
        for group in plan["groups"]["delete"]:
            run(["groupdel", group])
    for path in plan["rmtree"]:
        shutil.rmtree(at(root, path), ignore_errors=True)
    for path in plan["rmdir"]:
        with contextlib.suppress(OSError):  # not empty: something not provision's lives there
            os.rmdir(at(root, path))
    if real and os.path.isdir("/run/systemd/system"):
        subprocess.run(["systemctl", "daemon-reload"], capture_output=True, check=False)
    return result


# --- command line --------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(prog="r9700-lifecycle", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commands = ("record-before", "state", "info", "uninstall", "kernels", "kernel-plan", "kernel-revert")
    for name in (*commands, "rollback-packages", "release-packages"):
        command = sub.add_parser(name)
        command.add_argument("--root", default="/")
        if name in ("record-before", "uninstall"):
            command.add_argument(
                "--managed", required=True, help="JSON of the managed paths, groups, packages"
            )
        if name in ("record-before", "state"):
            command.add_argument("--time", help="ISO time to record (default: now, UTC)")
        if name == "state":
            command.add_argument("--new", required=True, help="JSON of the node's state")
        if name in ("uninstall", "kernel-revert", "rollback-packages"):
            command.add_argument("--dry-run", action="store_true")
        if name == "kernel-revert":
            command.add_argument("--before", required=True, help="JSON that `kernels` printed before")
        if name == "release-packages":
            command.add_argument("--repositories", required=True, help="JSON: base_url, suite, paths")
        if name == "kernels":
            command.add_argument("--running", help="the running kernel (default: uname -r where --root is /)")
    args = parser.parse_args(argv)
    try:
        managed = json.loads(args.managed) if getattr(args, "managed", None) else {}
        new = json.loads(args.new) if getattr(args, "new", None) else None
        before = json.loads(args.before) if getattr(args, "before", None) else {}
        repositories = json.loads(args.repositories) if getattr(args, "repositories", None) else {}
    except ValueError as exc:
        print(json.dumps({"error": f"bad JSON argument: {exc}"}))
        return 64
    try:
        if args.command == "record-before":
            result = record_before(args.root, managed, args.time)
        elif args.command == "state":
            result = write_state(args.root, new, args.time)
        elif args.command == "info":
            result = info(args.root)
        elif args.command == "kernels":
            result = kernels(args.root, args.running)
        elif args.command == "kernel-plan":
            result = kernel_plan(args.root)
        elif args.command == "release-packages":
            result = release_packages(args.root, repositories)
        elif args.command == "rollback-packages":
            result = rollback_packages(args.root, args.dry_run)
        elif args.command == "kernel-revert":
            result = kernel_revert(args.root, before, args.dry_run)
        else:
            result = uninstall(args.root, managed, args.dry_run)
    except Refused as exc:
        print(json.dumps({"error": str(exc), "changed": False}))
        print(f"r9700-lifecycle: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
