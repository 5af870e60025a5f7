"""Filter r9700_power_plan: each GPU's cap from the inventory, checked against the card's own
range in `amd-smi static --json`, and the node's policy file (r9700ctl/agent/power_budget.py).

Runs on the controller, like r9700_preflight's action plugin: r9700ctl must be importable by
Ansible's Python (plugin_utils/r9700ctl_package.py says so in one line when it is not).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.r9700ctl.nodes.plugins.plugin_utils.r9700ctl_package import require


def r9700_power_plan(
    static: Any, cap_w: Any, by_gpu: Any, psus: Any, margin: Any, tool: str = "amd-smi"
) -> dict[str, Any]:
    """{"caps_w", "policy" (bool), "policy_json", "problems", "ranges"} for one node.

    `static` is the registered result of `amd-smi static --json` (skipped when no cap is set).
    """
    power, amdsmi = require(
        AnsibleFilterError, "r9700ctl.agent.power_budget", "r9700ctl.agent.parsers.amdsmi"
    )

    node_cap, caps_by_gpu, problems = power.parse_caps(cap_w, by_gpu)
    psu_list, psu_problems = power.parse_psus(psus)
    margin_value, margin_problems = power.parse_margin(margin)
    problems += psu_problems + margin_problems
    wanted = node_cap is not None or bool(caps_by_gpu)
    ranges: dict[str, power.CapRange] = {}
    plan: dict[str, float] = {}
    if wanted and not problems:
        source = f"{tool} static --json"
        result = static if isinstance(static, dict) else {}
        if result.get("rc") != 0:
            lines = (result.get("stderr") or result.get("msg") or "").strip().splitlines()
            why = lines[-1] if lines else "no output"
            problems.append(
                f"{source} failed (rc {result.get('rc')}: {why}), so no cap can be checked against "
                "the cards' ranges; is ROCm installed (r9700_rocm)?"
            )
        else:
            report = amdsmi.parse(str(result.get("stdout", "")), source)
            if report.error:
                problems.append(report.error)
            for gpu in report.gpus:
                if gpu.bdf:
                    ranges[gpu.bdf] = power.CapRange(
                        gpu.bdf, gpu.power_cap_min_w, gpu.power_cap_max_w, gpu.power_cap_w
                    )
            # The node-wide cap is for the cards that have one (an integrated GPU reports none);
            # a per-GPU cap must name a card amd-smi lists.
            cappable = sorted(a for a, r in ranges.items() if r.max_w is not None)
            listed = sorted(ranges)
            plan, missing = power.plan_caps(node_cap, caps_by_gpu, listed)
            plan = {a: c for a, c in plan.items() if a in caps_by_gpu or a in cappable}
            problems += missing + power.check_caps(plan, ranges, source)
            if node_cap is not None and not cappable:
                problems.append(
                    f"{source} lists no GPU with a power-cap range: no card to cap at {node_cap:g} W"
                )
    policy = power.Policy(plan, tuple(psu_list), margin_value)
    return {
        "caps_w": plan,
        "policy": bool(plan or psu_list),
        "policy_json": policy.to_json(),
        "problems": problems,
        "ranges": {
            a: {"min_w": r.min_w, "max_w": r.max_w, "current_w": r.current_w} for a, r in ranges.items()
        },
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"r9700_power_plan": r9700_power_plan}
