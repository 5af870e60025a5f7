"""Sizes as people read them: one format for VRAM and BARs wherever r9700ctl prints them.

The P2P decision, doctor (live and from a bundle), the agent's checks and the reports all print
memory sizes; with one helper an R9700's VRAM reads the same everywhere. Part of the agent
package because the agent prints sizes too (it runs on nodes with nothing else of r9700ctl).
"""

from __future__ import annotations

GIB = 2**30
MIB = 2**20


def size_text(count: float) -> str:
    """Bytes as GiB with one decimal, MiB below 1 GiB; a trailing '.0' is dropped.

    An R9700 reports 30576 MiB of VRAM: "29.9 GiB", not the nominal "32 GiB" (its BAR) and not
    "30 GiB" (which would hide the difference), nor "29.8594 GiB"; a 256 MiB BAR: "256 MiB".
    """
    if count >= GIB:
        return f"{count / GIB:.1f}".removesuffix(".0") + " GiB"
    return f"{count / MIB:.1f}".removesuffix(".0") + " MiB"
