"""`r9700ctl uninstall` as text: per node what was (or would be) removed and put back, or why not.

The JSON document is `UninstallOutcome.to_dict()` (schema r9700ctl.uninstall/1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from r9700ctl.ansible_run import CHANGED, OK
from r9700ctl.lifecycle.service import LIFECYCLE_FACT

if TYPE_CHECKING:
    from r9700ctl.uninstall import UninstallOutcome


def node_lines(outcome: UninstallOutcome) -> list[str]:
    lines = []
    for host in outcome.hosts:
        if host.status in (OK, CHANGED):
            lines.append(f"{host.host}: {describe(host.fact(LIFECYCLE_FACT), outcome.check)}")
        else:
            lines.append(f"{host.host}: {host.status}: {host.first_error or 'did not run'}")
        if host.reboot_pending:
            lines.append(f"reboot required: {host.host} ({'; '.join(host.reboot_reasons)})")
    return lines


def describe(done: dict[str, Any], check: bool) -> str:
    if not done.get("changed"):
        return "nothing of r9700ctl's left to remove"
    verb = "would remove" if check else "removed"
    parts = [
        f"{len(done.get('remove', [])) + len(done.get('rmtree', []))} file(s)/directories",
        f"{len(done.get('purge', []))} package(s) ({', '.join(done.get('purge', [])[:6])})",
    ]
    restored = done.get("restore", [])
    text = f"{verb} {', '.join(parts)}"
    if restored:
        text += f"; {'would put' if check else 'put'} back as before provision: {', '.join(restored)}"
    if not done.get("complete", True):
        text += "; provisioned before r9700ctl recorded what was there first: managed files kept"
    return text
