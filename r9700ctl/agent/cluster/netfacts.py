"""Phase 1 (facts) on one node: what its cluster network looks like from here. Standard library only.

Every reader takes a `root` (sysfs under a test's tmp_path) or a `run` callable (canned command
output in tests), and never raises for a missing file or tool: a fact it cannot read is None and
the controller says what that leaves unjudged.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import resource
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

Runner = Callable[[list[str]], "tuple[int, str] | None"]


def run_command(argv: list[str], timeout: float = 20.0) -> tuple[int, str] | None:
    """(exit status, stdout) of a tool, or None when it is not installed or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode, done.stdout


def _read(root: str, path: str) -> str | None:
    try:
        with open(os.path.join(root, path.lstrip("/")), encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def interfaces(run: Runner) -> list[dict[str, Any]]:
    """`ip -j addr show`: name, state, MTU and IPv4 addresses (with prefix) of every interface."""
    out = run(["ip", "-j", "-4", "addr", "show"])
    if out is None or out[0] != 0:
        return []
    try:
        links = json.loads(out[1] or "[]")
    except ValueError:
        return []
    found = []
    for link in links:
        addresses = [
            f"{a.get('local')}/{a.get('prefixlen')}" for a in link.get("addr_info") or [] if a.get("local")
        ]
        found.append(
            {
                "ifname": link.get("ifname"),
                "state": link.get("operstate"),
                "mtu": link.get("mtu"),
                "addresses": addresses,
            }
        )
    return found


def cluster_interface(links: list[dict[str, Any]], network: str) -> tuple[str | None, str | None]:
    """(interface, address) holding an address inside the cluster network, else (None, None)."""
    net = ipaddress.ip_network(network, strict=False)
    for link in links:
        for cidr in link.get("addresses") or []:
            address = cidr.split("/")[0]
            if ipaddress.ip_address(address) in net:
                return link.get("ifname"), address
    return None, None


def route_to(run: Runner, address: str) -> dict[str, Any]:
    """`ip -j route get ADDRESS`: the interface and source address the kernel would use."""
    out = run(["ip", "-j", "route", "get", address])
    if out is None or out[0] != 0:
        return {"dev": None, "src": None, "error": "ip route get failed" if out else "ip not found"}
    try:
        routes = json.loads(out[1] or "[]")
    except ValueError:
        routes = []
    first = routes[0] if routes else {}
    return {"dev": first.get("dev"), "src": first.get("prefsrc"), "via": first.get("gateway")}


def nic(root: str, ifname: str, run: Runner) -> dict[str, Any]:
    """MTU, speed (Mb/s as ethtool reports it: /sys/class/net/X/speed), driver and firmware."""
    base = f"/sys/class/net/{ifname}"
    speed = _int(_read(root, f"{base}/speed"))
    driver_link = os.path.join(root, base.lstrip("/"), "device/driver")
    driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
    firmware = None
    out = run(["ethtool", "-i", ifname])
    if out is not None and out[0] == 0:
        fields = dict(line.split(": ", 1) for line in out[1].splitlines() if ": " in line)
        driver = fields.get("driver") or driver
        firmware = fields.get("firmware-version") or None
    return {
        "ifname": ifname,
        "mtu": _int(_read(root, f"{base}/mtu")),
        # The kernel reports -1 (or an error) where the link has no speed to say (virtio, some bonds).
        "speed_mbps": speed if speed is not None and speed > 0 else None,
        "operstate": _read(root, f"{base}/operstate"),
        "driver": driver,
        "firmware": firmware,
    }


def rdma_gids(root: str, ifname: str) -> list[dict[str, Any]]:
    """RoCE GIDs of RDMA ports bound to `ifname`: device, port, index, GID and type ("RoCE v2").

    /sys/class/infiniband/DEV/ports/P/gid_attrs/{ndevs,types}/INDEX and gids/INDEX (the kernel's
    ib_core sysfs; the files NCCL_IB_GID_INDEX is chosen from).
    """
    found = []
    pattern = os.path.join(root, "sys/class/infiniband/*/ports/*/gid_attrs/ndevs/*")
    for ndev_path in sorted(glob.glob(pattern)):
        port_dir = os.path.dirname(os.path.dirname(os.path.dirname(ndev_path)))
        index = os.path.basename(ndev_path)
        if (_read("/", ndev_path) or "") != ifname:
            continue
        gid = _read("/", os.path.join(port_dir, "gids", index)) or ""
        if not gid or gid.strip("0:") == "":
            continue
        found.append(
            {
                "device": os.path.basename(os.path.dirname(os.path.dirname(port_dir))),
                "port": os.path.basename(port_dir),
                "index": int(index) if index.isdigit() else index,
                "gid": gid,
                "type": _read("/", os.path.join(port_dir, "gid_attrs/types", index)),
            }
        )
    return found


def memlock() -> dict[str, Any]:
    """RLIMIT_MEMLOCK of this process (what the job would get when started like it); -1 = unlimited."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)

    def text(value: int) -> int:
        return -1 if value == resource.RLIM_INFINITY else value

    return {"soft_bytes": text(soft), "hard_bytes": text(hard)}


def clock(run: Runner) -> dict[str, Any]:
    """This node's time now, and what its time service says (chrony, else systemd-timesyncd)."""
    found: dict[str, Any] = {"epoch_s": time.time(), "service": None, "synchronized": None, "offset_s": None}
    out = run(["chronyc", "-c", "tracking"])
    if out is not None and out[0] == 0 and out[1].count(",") > 5:
        fields = out[1].strip().split(",")
        # chronyc -c tracking: field 5 is "System time" in seconds (offset of the system clock
        # from NTP time; chrony's tracking report), field 13 the leap status ("Normal" when synced).
        synced = fields[-1] != "Not synchronised"
        found.update(service="chrony", offset_s=_float(fields[4]), synchronized=synced)
        return found
    out = run(["timedatectl", "show", "--property=NTPSynchronized", "--value"])
    if out is not None and out[0] == 0 and out[1].strip() in ("yes", "no"):
        found.update(service="timedatectl", synchronized=out[1].strip() == "yes")
    return found


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def hostname() -> dict[str, Any]:
    """The host name and the IPv4 addresses it resolves to here (/etc/hosts, DNS: getaddrinfo)."""
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
        addresses = sorted({str(info[4][0]) for info in infos})
        error = ""
    except OSError as exc:
        addresses, error = [], str(exc)
    return {"name": name, "addresses": addresses, "error": error}


def firewall(run: Runner) -> dict[str, Any]:
    """Which firewalls are active (reported; reachability itself is measured in phase 2)."""
    state: dict[str, Any] = {}
    out = run(["nft", "list", "ruleset"])
    if out is not None and out[0] == 0:
        verdicts = [line for line in out[1].splitlines() if line.strip().endswith(("drop", "reject"))]
        state["nft_drop_rules"] = len(verdicts)
    out = run(["ufw", "status"])
    if out is not None and out[0] == 0:
        state["ufw"] = "active" if "Status: active" in out[1] else "inactive"
    out = run(["firewall-cmd", "--state"])
    if out is not None:
        state["firewalld"] = out[1].strip() or ("running" if out[0] == 0 else "not running")
    return state


def versions(root: str, run: Runner) -> dict[str, Any]:
    """ROCm (/opt/rocm/.info/version) and the RCCL package, as the host has them."""
    found: dict[str, Any] = {"rocm": _read(root, "/opt/rocm/.info/version")}
    out = run(["dpkg-query", "-W", "-f", "${Version}", "rccl"])
    found["rccl_package"] = out[1].strip() if out is not None and out[0] == 0 and out[1].strip() else None
    return found


def routes(plan: dict[str, Any], run: Runner = run_command) -> dict[str, dict[str, Any]]:
    """Peer name -> the route to its cluster address (the plan's `peers`; none before they are known)."""
    peers = {name: addr for name, addr in (plan.get("peers") or {}).items() if name != plan.get("node")}
    return {name: route_to(run, str(addr)) for name, addr in sorted(peers.items()) if addr}


def gather(plan: dict[str, Any], root: str = "/", run: Runner = run_command) -> dict[str, Any]:
    """Every fact of phase 1 for this node, as one JSON-ready dict."""
    links = interfaces(run)
    ifname, address = cluster_interface(links, str(plan["cluster_network"]))
    facts: dict[str, Any] = {
        "node": plan.get("node"),
        "cluster_network": plan["cluster_network"],
        "interface": ifname,
        "address": address,
        "interfaces": links,
        "routes": routes(plan, run),
        "nic": nic(root, ifname, run) if ifname else None,
        "rdma": rdma_gids(root, ifname) if ifname else [],
        "memlock": memlock(),
        "clock": clock(run),
        "hostname": hostname(),
        "firewall": firewall(run),
        "versions": versions(root, run),
        "tools": {tool: shutil.which(tool) is not None for tool in ("iperf3", "ping", "ethtool")},
    }
    return facts
