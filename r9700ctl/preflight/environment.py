"""THE environment list of the node (r9700ctl/envlist.py) and its own environment files
(r9700ctl/nodeenv.py): their checks here, their entries for r9700_env."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from r9700ctl.agent.result import CheckResult
from r9700ctl.manifest import Manifest
from r9700ctl.preflight.cluster import settings as cluster_settings
from r9700ctl.preflight.gpus import _visible_devices
from r9700ctl.preflight.model import Context, Gpu, Resolved, Settings
from r9700ctl.preflight.registry import register
from r9700ctl.preflight.release import p2p_hazards, workarounds


@register("environment", order=90)
def environment(ctx: Context) -> list[CheckResult]:
    return _compose_environment(
        ctx.res,
        ctx.settings,
        ctx.gpus,
        ctx.facts,
        ctx.host_vars,
        ctx.manifest,
        workarounds(ctx),
        p2p_hazards(ctx),
        ctx.cluster_nic,
    )


def _compose_environment(
    res: Resolved,
    settings: Settings,
    gpus: list[Gpu],
    facts: Mapping[str, Any],
    host_vars: Mapping[str, Any],
    manifest: Manifest,
    workarounds: dict[str, tuple[str, str, str]],
    p2p_hazards: list[Any],
    cluster_nic: Any = None,
) -> list[CheckResult]:
    """THE environment list (r9700ctl/envlist.py): its checks here, its entries for r9700_env."""
    from r9700ctl import envlist, nodeenv

    knobs, problems = envlist.EnvKnobs.from_vars(host_vars)
    target = envlist.EnvTarget(
        gpus=gpus,
        manifest=manifest,
        p2p_facts=facts.get("p2p") or {},
        visible_auto=_visible_devices(gpus) if res.igpu_present else "",
        allow_unsupported=settings.allow_unsupported,
        rocm_version=res.rocm_version,
        known_issue_workarounds=workarounds,
        p2p_hazards=p2p_hazards,
        cluster_interface=cluster_nic.interface if cluster_nic is not None else "",
        cluster=cluster_settings(host_vars),
    )
    plan = envlist.compose(knobs, target)
    res.environment = plan.to_dicts()
    res.p2p = plan.p2p.to_dict()
    res.hsa_override_gfx_version = plan.hsa_override
    res.rocr_visible_devices = plan.rocr_visible_devices
    own = nodeenv.judge(facts.get("environment_sources"), plan, target, knobs.comment_out_conflicts)
    res.node_environment_fixes = own.fixes
    return problems + plan.checks + own.checks
