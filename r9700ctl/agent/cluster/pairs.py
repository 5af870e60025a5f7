"""Phase 2 on one node: its part of every round of disjoint pairs. Standard library only.

The controller hands every node the same round-robin schedule (r9700ctl/cluster/plan.py): in each
round a node is the server of one pair, its client, or idle. Nodes keep step without a clock: a
server listens on the rendezvous port of its cluster address until its partner connects (or
`wait_s` passes), a client retries that connection until then; each moves to its next round when
its pair is done, and since every round is a perfect matching nobody waits for a third node.

One pair's test, over a line-based JSON control connection to the server's rendezvous port:
  1. the client connects to SERVER:PORT (the port torchrun's c10d store will use): reached, refused
     or timed out (dropped) is the first figure;
  2. the server opens a listener on a port the kernel picks from its ip_local_port_range (where
     gloo's and RCCL's own sockets live) and starts iperf3 on another; the client connects to the
     first: a firewall that lets the rendezvous through and drops the rest shows here;
  3. the client pings (small, then DF at the MTU), and runs iperf3 both ways;
  4. the client sends its figures to the server; both write what they saw.
On the way the client samples the server's clock (Cristian's method: the server's time against the
midpoint of one round trip), so clocks that disagree show per pair with a few ms of uncertainty.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from r9700ctl.agent.cluster import probes

CONTROL_ATTEMPT_S = 2.0  # one connection attempt to the server; refused ones retry at once


def _send(conn: socket.socket, document: dict[str, Any]) -> None:
    conn.sendall((json.dumps(document) + "\n").encode())


class _Lines:
    """One JSON document per line over a socket; lines that arrive together are kept apart."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buffer = b""

    def receive(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.conn.settimeout(left)
            try:
                chunk = self.conn.recv(65536)
            except OSError:  # a timeout, or the peer reset the connection
                return None
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            document = json.loads(line.decode() or "null")
        except ValueError:
            return None
        return document if isinstance(document, dict) else None


def run(plan: dict[str, Any]) -> dict[str, Any]:
    """Every round of this node's schedule, in order; returns what it saw in each."""
    rounds = []
    for index, step in enumerate(plan.get("rounds") or []):
        began = time.monotonic()
        if not step:
            rounds.append({"round": index, "idle": True})
            continue
        record = serve(plan, index, step) if step["role"] == "server" else visit(plan, index, step)
        record["seconds"] = round(time.monotonic() - began, 2)
        rounds.append(record)
    return {"node": plan.get("node"), "address": plan.get("address"), "rounds": rounds}


def serve(plan: dict[str, Any], index: int, step: dict[str, Any]) -> dict[str, Any]:
    own, port, wait_s = str(plan["address"]), int(plan["port"]), float(plan["wait_s"])
    record: dict[str, Any] = {"round": index, "role": "server", "partner": step["partner"]}
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((own, port))
        except OSError as exc:
            record["error"] = f"cannot listen on {own}:{port}: {exc.strerror or exc} (is it in use?)"
            return record
        listener.listen(4)
        deadline = time.monotonic() + wait_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                record["error"] = f"{step['partner']} did not connect to {own}:{port} within {wait_s:.0f} s"
                return record
            listener.settimeout(left)
            try:
                conn, peer = listener.accept()
            except TimeoutError:
                continue
            if step.get("address") and peer[0] != step["address"]:
                conn.close()  # a node already in a later round, early: it retries until we get there
                continue
            break
        with conn:
            record["control_from"] = peer[0]
            record["client"] = _serve_test(plan, conn, record)
    return record


def _serve_test(plan: dict[str, Any], conn: socket.socket, record: dict[str, Any]) -> dict[str, Any] | None:
    own = str(plan["address"])
    lines = _Lines(conn)
    if lines.receive(10) is None:
        record["error"] = "the client connected but sent no request"
        return None
    _send(conn, {"t": time.time()})  # at once: the client's clock sample (see visit)
    server = None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((own, 0))
        probe.listen(1)
        iperf_port = probes.free_port(own)
        server = probes.iperf_server(own, iperf_port)
        try:
            _send(conn, {"probe_port": probe.getsockname()[1], "iperf_port": iperf_port if server else None})
            probe.settimeout(float(plan["connect_timeout_s"]) + 2)
            try:
                accepted, _ = probe.accept()
                accepted.close()
                record["probe_accepted"] = True
            except TimeoutError:
                record["probe_accepted"] = False
            return lines.receive(float(plan["iperf_seconds"]) + 60)
        finally:
            if server is not None and server.poll() is None:
                server.kill()
                server.wait(timeout=10)


def visit(plan: dict[str, Any], index: int, step: dict[str, Any]) -> dict[str, Any]:
    own, port = str(plan["address"]), int(plan["port"])
    partner, address = str(step["partner"]), str(step["address"])
    record: dict[str, Any] = {"round": index, "role": "client", "partner": partner, "address": address}
    deadline = time.monotonic() + float(plan["wait_s"])
    attempt: dict[str, Any] = {}
    while time.monotonic() < deadline:
        began = time.monotonic()
        try:
            conn = socket.create_connection((address, port), CONTROL_ATTEMPT_S, source_address=(own, 0))
        except ConnectionRefusedError:
            attempt = {"outcome": "refused"}  # nobody listens yet: the partner is still busy
            time.sleep(0.2)
            continue
        except TimeoutError:
            attempt = {"outcome": "timeout", "seconds": round(time.monotonic() - began, 3)}
            continue
        except OSError as exc:
            attempt = {"outcome": f"error: {exc.strerror or exc}"}
            time.sleep(0.2)
            continue
        with conn:
            lines = _Lines(conn)
            sent, sent_mono = time.time(), time.monotonic()
            try:
                _send(conn, {"from": plan.get("node"), "round": index})
            except OSError:
                stamp = None
            else:
                stamp = lines.receive(20)
            if stamp is None:
                # Accepted by the kernel while the partner was still in an earlier round, and closed
                # when it left it: not this round's answer. Try again.
                attempt = {"outcome": "closed before answering"}
                time.sleep(0.2)
                continue
            record["control"] = {"port": port, "outcome": "ok"}
            if isinstance(stamp.get("t"), (int, float)):
                # Cristian's clock sample: the server's time against the midpoint of the round trip.
                rtt = time.monotonic() - sent_mono
                offset = float(stamp["t"]) - (sent + rtt / 2)
                record["clock"] = {"offset_s": round(offset, 6), "rtt_s": round(rtt, 6)}
            reply = lines.receive(20)
            if reply is None:
                record["error"] = "the server answered, then sent no ports"
                return record
            results = _measure(plan, step, own, address, reply)
            record.update(results)
            _send(conn, results)
            return record
    record["control"] = {"port": port, **attempt}
    return record


def _measure(
    plan: dict[str, Any], step: dict[str, Any], own: str, address: str, reply: dict[str, Any]
) -> dict[str, Any]:
    timeout = float(plan["connect_timeout_s"])
    results: dict[str, Any] = {"probe": probes.connect(address, int(reply["probe_port"]), timeout, own)}
    count = int(plan["ping_count"])
    results["ping"] = probes.ping(address, None, count, own)
    mtu = step.get("mtu")
    if isinstance(mtu, int) and mtu > probes.IPV4_ICMP_HEADERS:
        results["ping_mtu"] = probes.ping(address, mtu - probes.IPV4_ICMP_HEADERS, count, own)
    if reply.get("iperf_port") is None:
        results["iperf"] = {"ran": False, "error": "iperf3 is not installed on the server"}
    elif results["probe"]["outcome"] != "ok":
        results["iperf"] = {"ran": False, "error": "not run: the server's ephemeral ports are not reachable"}
    else:
        results["iperf"] = probes.iperf_client(
            address, int(reply["iperf_port"]), own, int(plan["iperf_seconds"]), int(plan["iperf_streams"])
        )
    return results
