"""The measurements of a pair (phase 2) and their parsers: ping, TCP connect, iperf3. Stdlib only.

Commands (Debian/Ubuntu packages iputils-ping and iperf3; the r9700_cluster role installs them):
  ping -M do -s MTU-28 -c N -i 0.2 -W 1 PEER   DF ping at the MTU: -M do forbids fragmentation, and
      28 = the IPv4 (20) and ICMP (8) headers, so the packet is exactly the MTU (ping(8), iputils)
  iperf3 -s -1 -B OWN -p PORT                    one test, then exit (iperf3(1) --one-off)
  iperf3 -c PEER -p PORT -B OWN -t T -P S --bidir -J   both directions at once, JSON (iperf3 >= 3.7)
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from typing import Any

# ping's summary line: "3 packets transmitted, 3 received, 0% packet loss, time 402ms".
_PING_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
# Per-packet lines say "Frag needed" / "message too long" when the local MTU is below the size.
_PING_TOO_LONG = re.compile(r"message too long|Frag needed|local error", re.IGNORECASE)
IPV4_ICMP_HEADERS = 28
BITS_PER_GB = 8e9  # GB/s base 10: a figure comparable with busbw


def ping(address: str, size: int | None, count: int, source: str | None = None) -> dict[str, Any]:
    """Loss of `count` pings (DF at `size` bytes of payload when given); never raises."""
    if shutil.which("ping") is None:
        return {"ran": False, "error": "ping is not installed (iputils-ping)"}
    argv = ["ping", "-n", "-c", str(count), "-i", "0.2", "-W", "1"]
    if size is not None:
        argv += ["-M", "do", "-s", str(size)]
    if source:
        argv += ["-I", source]
    try:
        done = subprocess.run([*argv, address], capture_output=True, text=True, timeout=count + 10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ran": False, "error": f"ping did not finish: {exc}"}
    return {"ran": True, "size": size, **parse_ping(done.stdout + done.stderr, count)}


def parse_ping(text: str, count: int) -> dict[str, Any]:
    """sent, received and whether the local stack refused the size (its MTU is below it)."""
    match = _PING_SUMMARY.search(text)
    sent, received = (int(match.group(1)), int(match.group(2))) if match else (count, 0)
    return {"sent": sent, "received": received, "local_too_long": bool(_PING_TOO_LONG.search(text))}


def connect(address: str, port: int, timeout: float, source: str | None = None) -> dict[str, Any]:
    """One TCP connect: ok, refused (a RST: nothing listens, or a REJECT rule) or timeout (dropped)."""
    began = time.monotonic()
    try:
        bound = (source, 0) if source else None
        with socket.create_connection((address, port), timeout=timeout, source_address=bound):
            outcome = "ok"
    except ConnectionRefusedError:
        outcome = "refused"
    except TimeoutError:
        outcome = "timeout"
    except OSError as exc:
        outcome = f"error: {exc.strerror or exc}"
    return {"port": port, "outcome": outcome, "seconds": round(time.monotonic() - began, 3)}


def free_port(address: str) -> int:
    """A port the kernel hands out from ip_local_port_range (where gloo's and RCCL's sockets live)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def tcp_table() -> list[list[str]]:
    """The rows of /proc/net/tcp, split (local, remote as hex address:port; state; inode at 9)."""
    try:
        with open("/proc/net/tcp", encoding="ascii") as fh:
            return [row.split() for row in fh.read().splitlines()[1:]]
    except OSError:
        return []


def listening(port: int) -> bool:
    """Whether a TCP socket listens on `port` (state 0A = LISTEN)."""
    return any(len(f) > 3 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port for f in tcp_table())


def iperf_server(address: str, port: int) -> subprocess.Popen[str] | None:
    """iperf3 serving one test on address:port, started and listening; None without iperf3."""
    if shutil.which("iperf3") is None:
        return None
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-B", address, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and server.poll() is None and not listening(port):
        time.sleep(0.05)
    return server


def iperf_client(address: str, port: int, source: str, seconds: int, streams: int) -> dict[str, Any]:
    """Both directions at once for `seconds`; the parsed result, or why there is none."""
    if shutil.which("iperf3") is None:
        return {"ran": False, "error": "iperf3 is not installed"}
    argv = ["iperf3", "-c", address, "-p", str(port), "-B", source, "-t", str(seconds), "-P", str(streams),
            "--bidir", "-J", "--connect-timeout", "5000"]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ran": False, "error": f"iperf3 did not finish: {exc}"}
    return parse_iperf(done.stdout, done.returncode, done.stderr)


def _gbs(bits_per_second: Any) -> float | None:
    if not isinstance(bits_per_second, (int, float)):
        return None
    return round(float(bits_per_second) / BITS_PER_GB, 6)


def parse_iperf(text: str, rc: int = 0, stderr: str = "") -> dict[str, Any]:
    """iperf3 -J --bidir: GB/s each way (what the receiver got) and per-interval figures each way."""
    try:
        document = json.loads(text) if text.strip() else {}
    except ValueError:
        document = {}
    if not isinstance(document, dict) or document.get("error") or "end" not in document:
        said = document.get("error") if isinstance(document, dict) else None
        why = said or stderr.strip() or f"exit {rc}"
        return {"ran": False, "error": f"iperf3: {why}"}
    end = document["end"]
    forward = _gbs((end.get("sum_received") or {}).get("bits_per_second"))
    reverse = _gbs((end.get("sum_received_bidir_reverse") or {}).get("bits_per_second"))
    windows_forward, windows_reverse = [], []
    for interval in document.get("intervals") or []:
        if not isinstance(interval, dict):
            continue
        for key, into in (("sum", windows_forward), ("sum_bidir_reverse", windows_reverse)):
            value = _gbs((interval.get(key) or {}).get("bits_per_second"))
            if value is not None and not (interval.get(key) or {}).get("omitted"):
                into.append(value)
    return {
        "ran": True,
        "forward_gbs": forward,
        "reverse_gbs": reverse,
        "windows_forward_gbs": windows_forward,
        "windows_reverse_gbs": windows_reverse,
        "retransmits": (end.get("sum_sent") or {}).get("retransmits"),
        "version": (document.get("start") or {}).get("version"),
    }
