"""`r9700ctl uninstall` as a use case: check the inventory, run uninstall.yml, gather each node's result.

Nothing is contacted before the inventory passed its checks (BadInput, exit 64). The role
r9700_lifecycle (playbooks/uninstall.yml) removes on each node what /etc/r9700ctl/before.json
says provision added, and hands back what it did as the host fact `r9700_lifecycle`. Exit codes
as provision's: 0 done, 1 done with a reboot pending, 2 a node failed (or has no record), 3 a
node did not answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r9700ctl import agentpack, ansible_run, paths
from r9700ctl import inventory as inventory_module
from r9700ctl.agent import schemas
from r9700ctl.lifecycle.service import LIFECYCLE_FACT
from r9700ctl.provision import exit_code_for


@dataclass
class UninstallOutcome:
    check: bool  # --check: what would be removed, nothing changed
    hosts: list[ansible_run.HostResult]  # inventory order
    exit_code: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": schemas.UNINSTALL,
            "check": self.check,
            "exit_code": self.exit_code,
            "nodes": [
                {"host": h.host, "status": h.status, "error": h.first_error, "result": h.fact(LIFECYCLE_FACT)}
                for h in self.hosts
            ],
        }


def uninstall(inventory: Path, group: str, limit: str | None = None, check: bool = False) -> UninstallOutcome:
    checked = inventory_module.load_inventory(inventory, group=group, limit=limit)
    with agentpack.node_program_vars() as node:  # r9700-lifecycle uninstall does the work
        result = ansible_run.run_playbook(
            ansible_run.RunRequest(
                playbook=paths.playbook("uninstall.yml"),
                inventory=checked.path,
                limit=limit,
                check=check,
                hosts=len(checked.hosts),
                extra_vars={"r9700_group": group, **node},
            )
        )
    hosts = [result.hosts.get(name) or ansible_run.HostResult(host=name) for name in checked.host_names]
    return UninstallOutcome(check=check, hosts=hosts, exit_code=exit_code_for(result, hosts))
