"""r9700-power-cap: set the GPU power caps of r9700ctl's power policy (role r9700_power).

    r9700-power-cap apply   [--policy FILE] [--root DIR] [--wait S] [--json]
    r9700-power-cap check   [--policy FILE] [--root DIR] [--json]
    r9700-power-cap restore [--policy FILE] [--root DIR] [--json]

For each GPU of the policy's "caps_w" (PCI address -> whole watts) it finds the card's amdgpu
hwmon directory (/sys/bus/pci/devices/<address>/hwmon/hwmon*, waiting up to --wait seconds for
the driver to register it at boot), reads power1_cap_min and power1_cap_max (microwatts), and
refuses a cap outside that range. `apply` writes power1_cap only where it differs (so a second
run changes nothing), `check` only reports, `restore` writes power1_cap_default back.

power1_cap is the kernel's documented interface for the cap (amdgpu_pm.c, "DOC: hwmon":
"power1_cap: selected power cap in microWatts", with power1_cap_min/_max), the value
`sudo amd-smi set --gpu <address> --power-cap <watts>` sets. This script writes it directly
because the amd-smi command line changed in ROCm 7.2 (`--power-cap <ppt0|ppt1> <watts>`, AMD SMI
CHANGELOG) and older amd-smi exits 0 on a refused value ("Power cap must be between ..."), so
neither its syntax nor its exit status can be relied on across the releases r9700ctl installs.

Exit status: 0 every cap in force (check: none differs), 1 a card refused or missing (named on
stderr), 64 unreadable policy. Standard library only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

DEFAULT_POLICY = "/etc/r9700ctl/power.json"
UW = 1_000_000


def read_int(path):
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def hwmon_dir(root, address, wait_s):
    """The card's hwmon directory with a power1_cap, waiting up to wait_s for the driver."""
    pattern = os.path.join(root, "sys/bus/pci/devices", address, "hwmon", "hwmon*", "power1_cap")
    deadline = time.monotonic() + wait_s
    while True:
        found = sorted(glob.glob(pattern))
        if found:
            return os.path.dirname(found[0])
        if time.monotonic() >= deadline:
            return None
        time.sleep(1.0)


def load_caps(path):
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle)
    caps = document.get("caps_w") if isinstance(document, dict) else None
    if not isinstance(caps, dict):
        raise ValueError("no caps_w mapping")
    out = {}
    for address, watts in caps.items():
        if isinstance(watts, bool) or not isinstance(watts, (int, float)) or watts <= 0:
            raise ValueError(f"caps_w[{address}] is not watts: {watts!r}")
        out[str(address)] = round(watts)
    return out


def one_gpu(action, root, address, watts, wait_s):
    """(state, detail) for one card; state is ok, changed, restored or failed."""
    directory = hwmon_dir(root, address, wait_s)
    if directory is None:
        return "failed", f"{address}: no amdgpu hwmon power1_cap (card absent or driver not loaded)"
    current = read_int(os.path.join(directory, "power1_cap"))
    if action == "restore":
        default = read_int(os.path.join(directory, "power1_cap_default"))
        if default is None:
            return "failed", f"{address}: power1_cap_default is unreadable"
        if current == default:
            return "ok", f"{address}: already at its default {default / UW:g} W"
        return write(directory, address, default, "restored")
    low = read_int(os.path.join(directory, "power1_cap_min"))
    high = read_int(os.path.join(directory, "power1_cap_max"))
    if high is None:
        return "failed", f"{address}: power1_cap_max is unreadable, {watts} W cannot be checked"
    wanted = watts * UW
    if not (low or 0) <= wanted <= high:
        return "failed", (
            f"{address}: {watts} W is outside the {(low or 0) / UW:g}-{high / UW:g} W this card accepts"
        )
    if current == wanted:
        return "ok", f"{address}: {watts} W in force"
    if action == "check":
        shown = "unreadable" if current is None else f"{current / UW:g} W"
        return "failed", f"{address}: cap is {shown}, policy says {watts} W"
    return write(directory, address, wanted, "changed")


def write(directory, address, microwatts, state):
    try:
        with open(os.path.join(directory, "power1_cap"), "w", encoding="ascii") as handle:
            handle.write(f"{microwatts}\n")
    except OSError as exc:
        return "failed", f"{address}: writing power1_cap failed: {exc.strerror or exc}"
    return state, f"{address}: cap set to {microwatts / UW:g} W"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="r9700-power-cap", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("apply", "check", "restore"))
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--root", default="/", help="file-system root (tests use a fake sysfs tree)")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for each card's driver")
    parser.add_argument("--json", action="store_true", help="one JSON summary on stdout")
    args = parser.parse_args(argv)
    try:
        caps = load_caps(args.policy)
    except (OSError, ValueError) as exc:
        print(f"r9700-power-cap: cannot read {args.policy}: {exc}", file=sys.stderr)
        return 64
    summary = {"ok": [], "changed": [], "restored": [], "failed": {}, "details": []}
    for address, watts in sorted(caps.items()):
        state, detail = one_gpu(args.action, args.root, address, watts, args.wait)
        summary["details"].append(detail)
        if state == "failed":
            summary["failed"][address] = detail
            print(f"r9700-power-cap: {detail}", file=sys.stderr)
        else:
            summary[state].append(address)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        for detail in summary["details"]:
            print(detail)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
