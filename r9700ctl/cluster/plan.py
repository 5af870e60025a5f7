"""Who meets whom, when: round-robin rounds of disjoint pairs, retests, and each node's plan.

`rounds(nodes)`: the circle method (Kirkman; a round-robin tournament schedule): with n nodes
(one idle slot added when n is odd) n-1 rounds of n/2 disjoint pairs cover every pair exactly once,
so each round keeps every node busy with exactly one partner and no link carries two tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The c10d store's port: torchrun's default rendezvous endpoint port (torch.distributed.run:
# "--rdzv-endpoint ... port 29400 if not specified"). Phase 2 tests exactly this port.
RENDEZVOUS_PORT = 29400

Pair = tuple[str, str]  # (server, client) within a round; the pair itself is unordered


def pair_key(a: str, b: str) -> Pair:
    """The pair in a canonical order (as matrices and results name it)."""
    return (a, b) if a <= b else (b, a)


def pair_subject(a: str, b: str) -> str:
    first, second = pair_key(a, b)
    return f"{first}<->{second}"


def rounds(nodes: list[str]) -> list[list[Pair]]:
    """Every pair once, in rounds of disjoint pairs (circle method); the server alternates."""
    players: list[str | None] = list(nodes)
    if len(players) % 2:
        players.append(None)  # the idle slot
    count = len(players)
    schedule = []
    for index in range(count - 1):
        pairs = []
        for i in range(count // 2):
            a, b = players[i], players[count - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if (index + i) % 2 == 0 else (b, a))
        schedule.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]  # rotate all but the first
    return schedule


def disjoint_rounds(pairs: list[Pair]) -> list[list[Pair]]:
    """Given pairs (retests), as few rounds as a greedy pass makes, no node twice in a round."""
    remaining = list(pairs)
    schedule = []
    while remaining:
        busy: set[str] = set()
        this_round, later = [], []
        for a, b in remaining:
            if a in busy or b in busy:
                later.append((a, b))
            else:
                this_round.append((a, b))
                busy.update((a, b))
        schedule.append(this_round)
        remaining = later
    return schedule


@dataclass(frozen=True)
class Measure:
    """How phase 2 measures a pair (not thresholds: those are in thresholds.yaml cluster.*)."""

    iperf_seconds: int = 5  # iperf3 -t: long enough for TCP to leave slow start, short per round
    iperf_streams: int = 4  # -P 4 (the research notes' iperf3 -P 4 -t 5): one stream rarely fills a fast link
    ping_count: int = 3
    connect_timeout_s: float = 5.0  # a SYN that gets no answer in 5 s was dropped
    wait_s: float = 60.0  # how long a node waits for its partner of a round (see agent/cluster/pairs.py)

    def round_budget_s(self) -> float:
        """The longest one round can take on a node: waiting, then every probe's own timeout."""
        return self.wait_s + self.iperf_seconds + 60 + 2 * self.connect_timeout_s + 2 * self.ping_count


def pair_plans(
    schedule: list[list[Pair]],
    addresses: dict[str, str],
    mtus: dict[str, int | None],
    measure: Measure,
    port: int = RENDEZVOUS_PORT,
) -> dict[str, dict[str, Any]]:
    """Each node's plan for phase 2: its address and, per round, its role, partner and the MTU to
    ping at (the smaller of the two nodes': what the path must carry)."""
    plans: dict[str, dict[str, Any]] = {}
    for node, address in addresses.items():
        plans[node] = {
            "node": node,
            "address": address,
            "port": port,
            "wait_s": measure.wait_s,
            "connect_timeout_s": measure.connect_timeout_s,
            "ping_count": measure.ping_count,
            "iperf_seconds": measure.iperf_seconds,
            "iperf_streams": measure.iperf_streams,
            "rounds": [],
        }
    for pairs in schedule:
        for node in plans:
            plans[node]["rounds"].append(None)
        for server, client in pairs:
            known = [m for m in (mtus.get(server), mtus.get(client)) if isinstance(m, int)]
            mtu = min(known) if known else None
            plans[server]["rounds"][-1] = {"role": "server", "partner": client, "address": addresses[client]}
            plans[client]["rounds"][-1] = {
                "role": "client",
                "partner": server,
                "address": addresses[server],
                "mtu": mtu,
            }
    return plans
