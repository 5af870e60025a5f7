"""`r9700ctl lab status` as text: the lab's state and each part's (the JSON is LabStatus.to_json())."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from r9700ctl.lab.health import LabStatus


def status_lines(result: LabStatus) -> list[str]:
    if not result.exists:
        return [f"no lab in {result.directory} (start one: sudo r9700ctl lab up --dir {result.directory})"]
    verdict = "up" if result.healthy else f"NOT healthy (phase {result.phase})"
    lines = [f"lab r97l{result.lab_id} in {result.directory}: {verdict}, subnet {result.subnet}"]
    return lines + [f"  {c.name:<8} {c.state:<5} {c.detail}" for c in result.components]
