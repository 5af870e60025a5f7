"""Is this node as the last complete provision left it? (runs ON the node: standard library only)

A provision that ends without a failure records, in /etc/r9700ctl/converged.json, the key of
what it was asked to do (the controller's hash of the collection, the r9700ctl package and every
r9700_* value: r9700ctl/converge.py) and what it left: every
managed file (sha256, mode, owner) and directory, r9700ctl's own directories, the package
database (versions and holds), the group database, the kernel and its command line, DKMS's
builds, the units' states where systemd runs, whether dockerd answers and which image it holds,
and the machine the roles' facts come from (machine(): provision gathers Ansible's facts only on
a node that is not converged, so the node itself says when they would differ).

The next provision asks first (`check`): with the same key and a node that still observes as
recorded, every role would find nothing to do, so the play ends there for the node (changed=0)
and says why; any difference (a file edited by hand, a package upgraded, a user taken out of a
group, dockerd started since) names what differs and the roles run in full, as they do with
`r9700ctl provision --full`. Everything is compared, nothing is assumed: a difference that the
roles would not act on (an unrelated package upgraded) costs one full run, never a missed change.

Called through r9700ctl.agentpack.stdin_invocation by the r9700_converged action plugin:
    python3 - ARGS   (ARGS: base64 JSON {"mode": "check"|"record", "managed": {...}, "key": ...,
                      "facts": {...}})  -> one JSON object on stdout
"""

from __future__ import annotations

import base64
import fnmatch
import glob
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.agent.atomic import write_atomic

RECORD = "/etc/r9700ctl/converged.json"
SCHEMA = schemas.CONVERGED
# Written by something else than provision between runs, or rewritten by tools on every use:
# never part of what provision left (the monitoring timer's metrics, gpg's trust database).
VOLATILE = (
    "*/converged.json",  # the record itself (RECORD)
    "/var/lib/prometheus/node-exporter/*.prom",
    "*/gnupg/*",
    # What validate and the monitoring timer write between provisions (reports, the agent's
    # journal, the timer's last figures), and the offline image archive (often 20 GB or more:
    # the image itself is observed by its id).
    "/var/lib/r9700ctl/reports*",
    "/var/lib/r9700ctl/journal*",
    "/var/lib/r9700ctl/monitoring*",
    "/var/lib/r9700ctl/images/*",
    # validate's run lock and the GPU inventory it compares the next run with, both in the agent's
    # journal directory /var/lib/r9700ctl (agent/journal.py, agent/checks/inventory.py).
    "/var/lib/r9700ctl/agent.lock",
    "/var/lib/r9700ctl/last-inventory.json",
)
# The GPUs' own state a full run acts on: the power cap each card has now (r9700_power applies
# the wanted one on every full run), the device nodes the containers and groups depend on.
POWER_CAPS = "/sys/class/drm/card*/device/hwmon/hwmon*/power1_cap"
DEVICE_NODES = ("/dev/kfd", "/dev/dri/renderD*", "/dev/dri/card*")
# Units whose running state a full run restores (a oneshot's active state is only its last run).
RUNNING_UNITS = ("docker.service", "prometheus-node-exporter.service")
# Whole files whose every change counts (an unrelated change costs one full run, never a miss).
DATABASES = ("/var/lib/dpkg/status", "/etc/group", "/etc/gshadow", "/proc/cmdline")
MAX_DIFFERENCES = 5  # named in the reason; the count says how many more
# Of /proc/cpuinfo, the lines Ansible's processor facts come from (processor, processor_cores,
# processor_count, processor_vcpus; the capitalised and "# processors" ones on other
# architectures): not the clock ("cpu MHz"), which changes all the time (ansible-core 2.19
# module_utils/facts/hardware/linux.py get_cpu_facts).
CPUINFO_KEYS = (
    "processor", "vendor_id", "model name", "physical id", "core id", "cpu cores", "siblings",
    "Processor", "cpu", "Vendor", "# processors", "max thread id", "ncpus active",
)  # fmt: skip
# Ansible's distribution facts: os-release, lsb-release, debian_version (Debian's point release),
# and before those any /etc/<name>-release, _release or _version file it knows (a file such as
# /etc/redhat-release changes the distribution by existing): every such file, by name and content
# (module_utils/facts/system/distribution.py OSDIST_LIST, the distro module's best version).
OS_RELEASE_PATTERNS = ("etc/*-release", "etc/*_release", "etc/*_version")
# A Xen paravirtualised guest gets other processor facts (linux.py: /proc/xen, /sys/hypervisor/type,
# the "vme" flag).
XEN = ("proc/xen", "sys/hypervisor/type")
# service_mgr: PID 1's name decides; where it says "init" or a shell, Ansible looks at these
# (module_utils/facts/system/service_mgr.py): whether systemd booted the node (sd_booted(3)),
# /sbin/init's link, systemctl, upstart's, OpenRC's, dinit's and sysvinit's paths.
SYSTEMD_BOOTED = "run/systemd/system"
INIT_PATHS = (SYSTEMD_BOOTED, "dev/.run/systemd", "dev/.systemd", "etc/init", "sbin/openrc", "etc/init.d",
              "etc/dinit.d", "usr/bin/systemctl", "bin/systemctl", "sbin/initctl")  # fmt: skip
# Where each fact the roles read (r9700ctl/converge.py FACTS) is observed: the name of its entry
# in observe(). ansible.builtin.setup derives them from these (its distribution, platform,
# hardware and service_mgr collectors); tests/unit/test_converge.py keeps both lists in step.
FACT_SOURCES = {
    "architecture": "machine",
    "distribution": "os release",
    "distribution_release": "os release",
    "distribution_version": "os release",
    "os_family": "os release",
    "env.SUDO_USER": "sudo user",
    "hostname": "machine",
    "kernel": "kernel",
    "memtotal_mb": "memory",
    "processor": "cpus",
    "processor_cores": "cpus",
    "processor_count": "cpus",
    "processor_nproc": "cpus",
    "processor_vcpus": "cpus",
    "service_mgr": "init",
}


def _volatile(path: str) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in VOLATILE)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(path: str) -> dict[str, Any] | None:
    """A path as provision would judge it: None when absent, else kind, mode, owner (and sha256)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    entry: dict[str, Any] = {"mode": oct(stat.S_IMODE(st.st_mode)), "uid": st.st_uid, "gid": st.st_gid}
    if stat.S_ISLNK(st.st_mode):
        entry["link"] = os.readlink(path)
    elif stat.S_ISDIR(st.st_mode):
        entry["kind"] = "directory"
    elif stat.S_ISREG(st.st_mode):
        try:
            entry["sha256"] = _sha256(path)
        except OSError as exc:
            entry["error"] = exc.strerror or str(exc)
    else:
        entry["kind"] = "other"
    return entry


def tree(root: str) -> dict[str, Any]:
    """Every entry below `root` (r9700ctl's own directories), volatile ones left out."""
    entries: dict[str, Any] = {}
    if not os.path.isdir(root):
        return entries
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in [*dirs, *sorted(files)]:
            path = os.path.join(directory, name)
            if not _volatile(path):
                entries[path] = describe(path)
    return entries


def _command(argv: list[str]) -> str | None:
    """A command's output (C locale), None when the program is missing or fails to run."""
    if shutil.which(argv[0]) is None:
        return None
    env = {**os.environ, "LC_ALL": "C"}
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=30, env=env, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not run: {exc}"
    return f"rc={done.returncode}\n{done.stdout.strip()}"


def observe(managed: dict[str, Any], image: str = "") -> dict[str, Any]:
    """What the node is now, for what provision manages (r9700_lifecycle's managed list)."""
    seen: dict[str, Any] = {}
    # watched: paths provision removes where it finds them (AMD's one-line sources, apt-key's ring).
    for path in [*managed.get("files", []), *managed.get("dirs", []), *managed.get("watched", [])]:
        if not _volatile(path):
            seen[path] = describe(path)
    for root in managed.get("owned_dirs", []):
        seen[root] = describe(root)
        seen.update(tree(root))
    for path in DATABASES:
        seen[path] = describe(path)
    seen["kernel"] = os.uname().release
    seen.update(machine())
    seen["dkms"] = _command(["dkms", "status"])
    for path in sorted(glob.glob(POWER_CAPS)):
        seen[path] = _read(path)
    for pattern in DEVICE_NODES:
        for path in sorted(glob.glob(pattern)):
            seen[path] = describe(path)
    seen["display devices"] = _display_devices()
    # What apt would install now: a rebuild the mirror published under the same release, or a
    # release it no longer offers, is what a full run acts on (preflight refreshed the lists).
    packages = sorted({*managed.get("packages", []), *managed.get("release_packages", [])})
    if packages:
        seen["apt candidates"] = _command(["apt-cache", "policy", *packages])
    if os.path.isdir("/run/systemd/system"):  # systemd is the init (sd_booted(3))
        for unit in [*managed.get("units", []), *RUNNING_UNITS]:
            states = [_command(["systemctl", "is-enabled", unit])]
            if unit.endswith(".timer") or unit in RUNNING_UNITS:
                states.append(_command(["systemctl", "is-active", unit]))
            seen[f"unit {unit}"] = states
    if shutil.which("docker"):
        seen["dockerd"] = _command(["docker", "info", "--format", "{{.ServerVersion}}"])
        if image:
            seen["image"] = _command(["docker", "image", "inspect", "--format", "{{.Id}}", image])
    return seen


def machine(root: str = "/") -> dict[str, Any]:
    """What the facts the roles read are derived from (FACT_SOURCES), as raw as they come."""
    uname = os.uname()
    cpuinfo = _read(os.path.join(root, "proc/cpuinfo")) or ""
    meminfo = _read(os.path.join(root, "proc/meminfo")) or ""
    flags = next((line for line in cpuinfo.splitlines() if line.split(":")[0].strip() == "flags"), "")
    releases = sorted(
        {path for pattern in OS_RELEASE_PATTERNS for path in glob.glob(os.path.join(root, pattern))}
    )
    init_link = os.path.join(root, "sbin/init")
    return {
        "machine": {"hostname": uname.nodename, "architecture": uname.machine},
        "os release": {os.path.relpath(path, root): _read(path) for path in releases},
        "cpus": {
            "lines": [line for line in cpuinfo.splitlines() if line.split(":")[0].strip() in CPUINFO_KEYS],
            "usable": len(os.sched_getaffinity(0)),
            # the flags line itself moves with microcode and kernels: only what Ansible reads of it
            "xen": [
                os.path.exists(os.path.join(root, XEN[0])),
                _read(os.path.join(root, XEN[1])),
                " vme " in f" {flags.split(':', 1)[-1]} ",
            ],
        },
        "memory": [line for line in meminfo.splitlines() if line.startswith("MemTotal:")],
        "init": {
            "pid 1": _read(os.path.join(root, "proc/1/comm")),
            "/sbin/init": os.readlink(init_link) if os.path.islink(init_link) else None,
            "paths": [path for path in INIT_PATHS if os.path.exists(os.path.join(root, path))],
        },
        "sudo user": os.environ.get("SUDO_USER"),
    }


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _display_devices() -> list[Any]:
    """Every display-class PCI function with its ids and the driver bound to it (sysfs)."""
    found = []
    for device in sorted(glob.glob("/sys/bus/pci/devices/*")):
        if not (_read(f"{device}/class") or "").startswith("0x03"):
            continue
        driver = os.path.realpath(f"{device}/driver") if os.path.exists(f"{device}/driver") else ""
        found.append([os.path.basename(device), _read(f"{device}/vendor"), _read(f"{device}/device"),
                      os.path.basename(driver)])  # fmt: skip
    return found


def differences(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs, as short phrases ('/etc/x changed', '/etc/y is gone'), in a stable order."""
    found = []
    for name in sorted(set(recorded) | set(now)):
        before, after = recorded.get(name), now.get(name)
        if before == after:
            continue
        if name not in now or (after is None and before is not None):
            found.append(f"{name} is gone")
        elif name not in recorded or (before is None and after is not None):
            found.append(f"{name} appeared")
        else:
            found.append(f"{name} changed")
    return found


def check(args: dict[str, Any], where: str = RECORD) -> dict[str, Any]:
    """{"recorded_key", "differences", "facts"}: the last record against the node as it is now."""
    try:
        record = json.loads(Path(where).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {
            "recorded_key": None,
            "differences": [],
            "facts": {},
            "reason": "no complete provision recorded",
        }
    except (OSError, ValueError) as exc:
        return {"recorded_key": None, "differences": [], "facts": {}, "reason": f"unreadable record ({exc})"}
    if record.get("schema") != SCHEMA:
        return {"recorded_key": None, "differences": [], "facts": {}, "reason": "a record of another version"}
    now = observe(args.get("managed") or {}, str(record.get("image") or ""))
    return {
        "recorded_key": record.get("key"),
        "differences": differences(record.get("observed") or {}, now),
        "facts": record.get("facts") or {},
        "recorded_at": record.get("recorded_at"),
        "observed": len(now),
    }


def _unrecorded(reason: str) -> dict[str, Any]:
    return {"recorded_key": None, "differences": [], "facts": {}, "reason": reason}


# What this run did to the image, said as the node has it now (a run that pulled it leaves it there).
_IMAGE_ACTIONS = re.compile(r" \((pulled|loaded from [^)]*)\)$")


def settled(facts: dict[str, Any]) -> dict[str, Any]:
    """The facts as a run that finds this node converged reports them: nothing installed since (the
    versions before are the versions after), an image pulled or loaded by this run is present.
    Recorded that way, a later complete run that changes nothing writes the same record."""
    settled_facts = dict(facts)
    versions = settled_facts.get("r9700_versions")
    if isinstance(versions, dict) and "after" in versions:
        settled_facts["r9700_versions"] = {**versions, "before": versions["after"]}
    containers = settled_facts.get("r9700_containers_status")
    if isinstance(containers, dict) and isinstance(containers.get("image"), str):
        image = _IMAGE_ACTIONS.sub(" (present)", containers["image"])
        settled_facts["r9700_containers_status"] = {**containers, "image": image}
    return settled_facts


def record(args: dict[str, Any], where: str = RECORD) -> dict[str, Any]:
    """Write the record of this complete provision; changed only when it differs from the last."""
    image = str(args.get("image") or "")
    document = {
        "schema": SCHEMA,
        "key": args["key"],
        "recorded_at": args.get("recorded_at"),
        "facts": settled(args.get("facts") or {}),
        "image": image,
        "observed": observe(args.get("managed") or {}, image),
    }
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    try:
        old = Path(where).read_text(encoding="utf-8")
        unchanged = {**json.loads(old), "recorded_at": None} == {**document, "recorded_at": None}
    except (OSError, ValueError):
        unchanged = False
    if unchanged:
        return {"changed": False, "observed": len(document["observed"])}
    if not args.get("dry_run"):
        write_atomic(where, text, mode=0o600)
    return {"changed": True, "observed": len(document["observed"])}


def main(argv: list[str]) -> int:
    try:
        args = json.loads(base64.b64decode((argv[1] if len(argv) > 1 else "").encode()).decode() or "{}")
        mode = args.get("mode")
        result = check(args) if mode == "check" else record(args) if mode == "record" else None
    except (ValueError, KeyError, OSError) as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    if result is None:
        print(json.dumps({"error": f"unknown mode {args.get('mode')!r} (check or record)"}))
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
