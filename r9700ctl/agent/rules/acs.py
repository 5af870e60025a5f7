"""Does a switch between two GPUs redirect their peer traffic? ACS P2P Request/Completion Redirect
(PCI_ACS_RR, PCI_ACS_CR in include/uapi/linux/pci_regs.h) on a switch port sends peer requests up
through the root complex. Linux sets them itself on root ports and switch downstream ports when the
IOMMU is on (pci_request_acs), so only the ports of a switch that two GPUs share matter: never a
card's own switch (its GPU sits behind it anyway) nor a root port (GPUs under different root ports
meet in the root complex by design). Fix: ACS off in the BIOS, `setpci -s PORT ECAP_ACS+6.w=0000`
at each boot, or the kernel parameter pci=noacs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from r9700ctl.agent.result import PASS, SKIP, WARN

CODE = "ACS_REDIRECT"
UNREADABLE_CODE = "ACS_UNREADABLE"
NOT_APPLICABLE = "NOT_APPLICABLE"
THRESHOLD = "no ACS redirect on the switch ports between GPUs"
REDIRECT_FLAGS = ("ReqRedir", "CmpltRedir")
# ACS control bits that send peer traffic to the root complex (include/uapi/linux/pci_regs.h).
REQUEST_REDIRECT = 0x0004  # PCI_ACS_RR
COMPLETION_REDIRECT = 0x0008  # PCI_ACS_CR


@dataclass(frozen=True)
class PortAcs:
    """A switch port's ACS as read: `redirects` the redirect controls set; unreadable: not known
    (extended config space needs root); a port without the ACS capability redirects nothing."""

    redirects: tuple[str, ...] = ()
    readable: bool = True
    why_unreadable: str = ""

    @classmethod
    def from_control(cls, control: int) -> PortAcs:
        flags = {"ReqRedir": REQUEST_REDIRECT, "CmpltRedir": COMPLETION_REDIRECT}
        return cls(tuple(name for name, bit in flags.items() if control & bit))


@dataclass(frozen=True)
class AcsVerdict:
    status: str
    reason: str = ""
    code: str = ""
    redirecting: dict[str, list[str]] = field(default_factory=dict)  # port -> "a <-> b" pairs
    flags: dict[str, tuple[str, ...]] = field(default_factory=dict)  # port -> redirect controls set
    unreadable: dict[str, str] = field(default_factory=dict)  # port -> why
    clear: dict[str, list[str]] = field(default_factory=dict)  # port -> pairs it does not redirect
    shared_pairs: int = 0
    # (pair, port, "redirects" | "unreadable" | "clear"), in the order the pairs were examined.
    judged: list[tuple[str, str, str]] = field(default_factory=list)


def ports_between(path_a: Sequence[str], path_b: Sequence[str]) -> list[str]:
    """The switch ports whose ACS decides where peer traffic between two GPUs goes.

    A path runs from the first bridge below the host bridge down to the GPU itself. GPUs whose paths
    share no bridge meet only in the root complex (nothing here to judge); GPUs that share bridges
    meet in the switch below the last shared one, and its two downstream ports are the ones whose
    redirect bits send their traffic up to the root complex.
    """
    shared = 0
    for a, b in zip(path_a, path_b, strict=False):
        if a != b:
            break
        shared += 1
    if shared == 0:
        return []
    ports = [path[shared] for path in (path_a, path_b) if shared < len(path) - 1]
    return list(dict.fromkeys(ports))


def judge(
    paths: Mapping[str, Sequence[str]],
    acs: Mapping[str, PortAcs],
    *,
    noacs_param: bool = False,
    p2p_off: bool = False,
) -> AcsVerdict:
    """`paths`: each GPU's bridges top first, ending with the GPU; `acs`: what each port showed.

    WARN for ports that redirect between two GPUs (a note, SKIP, when the node keeps P2P off:
    `p2p_off`); SKIP when a port that matters could not be read; fewer than two GPUs: SKIP;
    pci=noacs on the command line: PASS (the kernel leaves ACS off).
    """
    if len(paths) < 2:
        return AcsVerdict(SKIP, "needs >= 2 GPUs", NOT_APPLICABLE)
    if noacs_param:
        return AcsVerdict(PASS, "pci=noacs on the kernel command line")
    names = list(paths)
    redirecting: dict[str, list[str]] = {}
    flags: dict[str, tuple[str, ...]] = {}
    unreadable: dict[str, str] = {}
    clear: dict[str, list[str]] = {}
    judged: list[tuple[str, str, str]] = []
    shared = 0
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            ports = ports_between(paths[first], paths[second])
            shared += bool(ports)
            pair = f"{first} <-> {second}"
            for port in ports:
                state = acs.get(port, PortAcs())
                if not state.readable:
                    unreadable[port] = state.why_unreadable or "not readable"
                    judged.append((pair, port, "unreadable"))
                elif state.redirects:
                    redirecting.setdefault(port, []).append(pair)
                    flags[port] = state.redirects
                    judged.append((pair, port, "redirects"))
                else:
                    clear.setdefault(port, []).append(pair)
                    judged.append((pair, port, "clear"))
    found = {
        "redirecting": redirecting,
        "flags": flags,
        "unreadable": unreadable,
        "clear": clear,
        "judged": judged,
    }
    if shared == 0:
        note = "every GPU has its own root port: peer traffic crosses the root complex by design"
        return AcsVerdict(PASS, note, shared_pairs=0, **found)
    if redirecting:
        pairs = sorted({p for ps in redirecting.values() for p in ps})
        reason = (
            f"ACS redirect is on for port(s) {', '.join(sorted(redirecting))} between GPUs {', '.join(pairs)}"
        )
        return AcsVerdict(SKIP if p2p_off else WARN, reason, CODE, shared_pairs=shared, **found)
    if unreadable:
        ports = ", ".join(sorted(unreadable))
        reason = f"cannot read the ACS control of {ports}: extended PCI config space needs root"
        return AcsVerdict(SKIP, reason, UNREADABLE_CODE, shared_pairs=shared, **found)
    return AcsVerdict(PASS, "", shared_pairs=shared, **found)
