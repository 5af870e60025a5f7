"""Which node or link is at fault, from the outcomes of pairs (pure; used by phases 2 and 4).

The rule, after Google's cluster-health-scanner (a failed node is retested with a passed one and
fails only if it fails twice; a node that passed once is not failed later) and ROCm/cvs preflight
(a node failing against many peers is pruned):
  * a node is GOOD when it passed with some partner;
  * a node is BLAMED when it passed with nobody and failed with at least `min_good` (2) partners
    that are good without it (each passed with a third node);
  * a failed pair whose two nodes both passed with others points to their LINK;
  * any other failed pair is UNDECIDED, and `retests` proposes pairs of its nodes with good nodes
    not tried yet, so another round can decide (with two nodes, or every pair failing, none exist).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, CheckResult
from r9700ctl.cluster.plan import pair_key, pair_subject
from r9700ctl.cluster.verdicts import verdict

Pair = tuple[str, str]


@dataclass
class Isolation:
    blamed_nodes: dict[str, list[str]] = field(default_factory=dict)  # node -> good partners it failed with
    blamed_links: list[Pair] = field(default_factory=list)
    undecided: list[Pair] = field(default_factory=list)
    retests: list[Pair] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.blamed_nodes or self.blamed_links or self.undecided)


def isolate(nodes: list[str], failed: dict[Pair, bool], min_good: int = 2) -> Isolation:
    """`failed`: pair_key -> True when the pair FAILed (pairs not tested are absent)."""
    passes: dict[str, set[str]] = {n: set() for n in nodes}
    fails: dict[str, set[str]] = {n: set() for n in nodes}
    for (a, b), bad in failed.items():
        (fails if bad else passes)[a].add(b)
        (fails if bad else passes)[b].add(a)

    def good_without(partner: str, node: str) -> bool:
        return bool(passes.get(partner, set()) - {node})

    out = Isolation()
    for node in nodes:
        if passes[node]:
            continue
        witnesses = sorted(p for p in fails[node] if good_without(p, node))
        if len(witnesses) >= min_good:
            out.blamed_nodes[node] = witnesses
    for (a, b), bad in sorted(failed.items()):
        if not bad or a in out.blamed_nodes or b in out.blamed_nodes:
            continue
        if passes[a] and passes[b]:
            out.blamed_links.append((a, b))
        else:
            out.undecided.append((a, b))
    out.retests = _retests(nodes, out, passes, failed, min_good)
    return out


def _retests(
    nodes: list[str], out: Isolation, passes: dict[str, set[str]], failed: dict[Pair, bool], min_good: int
) -> list[Pair]:
    """Pairs that could decide the undecided: each suspect against good nodes it has not met."""
    good = [n for n in nodes if passes[n] and n not in out.blamed_nodes]
    wanted: list[Pair] = []
    suspects = sorted({n for pair in out.undecided for n in pair if not passes[n]})
    for suspect in suspects:
        met = {p for pair in failed for p in pair if suspect in pair} - {suspect}
        needed = min_good - len([p for p in met if p in good])
        for partner in good:
            if needed <= 0:
                break
            if partner not in met and pair_key(suspect, partner) not in wanted:
                wanted.append(pair_key(suspect, partner))
                needed -= 1
    return wanted


def results(isolation: Isolation, phase: str, findings: dict[Pair, CheckResult]) -> list[CheckResult]:
    """The isolation's verdicts, each naming the phase and the pair finding behind it."""
    out = []
    for node, partners in sorted(isolation.blamed_nodes.items()):
        first = findings.get(pair_key(node, partners[0]))
        why = f": {first.hint.split('; ')[0]}" if first is not None and first.hint else ""
        said = (
            f"{node} failed the {phase} phase with {', '.join(partners)}, each of which passed with "
            f"another node (e.g. {pair_subject(node, partners[0])}{why})"
        )
        out.append(
            verdict(
                "cluster.isolation.node",
                node,
                FAIL,
                code="CLUSTER_NODE_BLAMED",
                said=said,
                evidence={"phase": phase, "partners": partners},
            )
        )
    for a, b in isolation.blamed_links:
        first = findings.get((a, b))
        why = f" ({first.hint.split('; ')[0]})" if first is not None and first.hint else ""
        said = f"{a} and {b} failed the {phase} phase only with each other{why}; both passed with others"
        out.append(
            verdict(
                "cluster.isolation.link",
                pair_subject(a, b),
                FAIL,
                code="CLUSTER_LINK_BLAMED",
                said=said,
                evidence={"phase": phase},
            )
        )
    for a, b in isolation.undecided:
        said = f"{pair_subject(a, b)} failed the {phase} phase and no good partner is left to tell which side"
        out.append(
            verdict(
                "cluster.isolation.pair",
                pair_subject(a, b),
                INCONCLUSIVE,
                code="CLUSTER_ISOLATION_UNDECIDED",
                said=said,
                evidence={"phase": phase},
            )
        )
    if not out:
        out.append(
            verdict(
                "cluster.isolation",
                "cluster",
                PASS,
                said=f"no pair failed the {phase} phase",
                evidence={"phase": phase},
            )
        )
    return out
