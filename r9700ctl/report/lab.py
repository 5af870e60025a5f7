"""`r9700ctl lab` as text: what `up` built, what `down` removed, the lab's state and each part's
(the JSON of `lab status` is LabStatus.to_json()), and the progress lines of both."""

from __future__ import annotations

from typing import TYPE_CHECKING

from r9700ctl.errors import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_OK

if TYPE_CHECKING:
    from r9700ctl.lab.api import LabInfo
    from r9700ctl.lab.health import LabStatus
    from r9700ctl.lab.teardown import DownReport


def progress_line(elapsed_s: float, message: str) -> str:
    return f"[{elapsed_s:6.1f}s] {message}"


def up_lines(info: LabInfo, seconds: float) -> list[str]:
    """The lab as built: its nodes with how to reach them, the mirror, the inventory, what next."""
    lines = [f"lab up in {seconds:.1f} s: {len(info.nodes)} node(s) in {info.subnet}"]
    if info.cluster_subnet:
        members = ", ".join(f"{n} {a}" for n, a in info.cluster_nodes)
        lines.append(f"cluster    {info.cluster_subnet} on eth1: {members}")
    lines += [f"  {name:<8} {address:<15} ssh -F {info.ssh_config} {name}" for name, address in info.nodes]
    return [
        *lines,
        f"mirror     {info.mirror_url}  (stand-ins; key {info.key_fingerprint})",
        f"lab-host   {info.host_address} (the nodes' name for this host)",
        f"apt proxy  {info.proxy_url}",
        f"inventory  {info.inventory}",
        f"next       r9700ctl provision {info.inventory}",
        f"remove it  r9700ctl lab down --dir {info.directory}",
    ]


def down_lines(report: DownReport) -> list[str]:
    if not report.had_lab:
        return [f"no lab in {report.directory}: nothing to remove"]
    return [
        f"removed {len(report.removed)} item(s) in {report.seconds:.1f} s:",
        *(f"  {item}" for item in report.removed),
        "checked: no namespace, interface, mount, process or file of the lab is left",
    ]


def status_lines(result: LabStatus) -> list[str]:
    if not result.exists:
        return [f"no lab in {result.directory} (start one: sudo r9700ctl lab up --dir {result.directory})"]
    verdict = "up" if result.healthy else f"NOT healthy (phase {result.phase})"
    lines = [f"lab r97l{result.lab_id} in {result.directory}: {verdict}, subnet {result.subnet}"]
    return lines + [f"  {c.name:<8} {c.state:<5} {c.detail}" for c in result.components]


def status_exit_code(result: LabStatus) -> int:
    """`lab status` exits 0 when every part is up, 2 when something is down, 3 when DIR holds no lab
    (the contract's 'could not run'). It belongs with LabStatus (r9700ctl/lab/health.py), whose
    owner takes it there; until then it is here, beside the lines that say the same."""
    if result.healthy:
        return EXIT_OK
    return EXIT_FAIL if result.exists else EXIT_CANNOT_RUN
