"""Judge a node's raw facts before anything is changed on it (pure: no I/O).

One implementation for both entry points: the r9700_preflight role's action plugin and
``r9700ctl doctor`` gather facts with r9700ctl/agent/nodefacts.py on the node, then call
`judge(facts, host_vars, manifest)` here. The answer is a list of checks (CheckResults: id, status,
detail, fix as the hint, evidence, reason code) and the values later roles act on (`Resolved`): the
ROCm release resolved from ``auto``, the apt suite and repository paths, the GPU targets, the
accepted HSA override. A FAIL anywhere means the host is refused and nothing is changed on it.

One module per family of checks (system, gpus, release, kernel, driver, power, environment), each
registering its checks with an order (registry.py), as the agent's checks do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from r9700ctl.judging import HSA_VERSION, Gpu
from r9700ctl.manifest import Manifest
from r9700ctl.preflight import registry
from r9700ctl.preflight.gpus import IGPU_SOURCE
from r9700ctl.preflight.model import (
    GB,
    Context,
    Resolved,
    Settings,
    Verdict,
    check_dict,
    checked_vars,
    newest_first,
)

__all__ = [
    "GB",
    "HSA_VERSION",
    "IGPU_SOURCE",
    "Context",
    "Gpu",
    "Resolved",
    "Settings",
    "Verdict",
    "check_dict",
    "checked_vars",
    "judge",
    "newest_first",
    "prepare",
]


def prepare() -> None:
    """Load once what every judge() reads: the manifest, the checks, the roles' argument specs and
    Ansible's validator. The r9700_preflight action calls it where ansible-playbook loads the
    plugin, so the worker it forks per host finds them loaded (about 0.1 s of CPU per host)."""
    from r9700ctl import manifest

    manifest.load()
    registry.load()
    checked_vars({})


def judge(facts: Mapping[str, Any], host_vars: Mapping[str, Any], manifest: Manifest) -> Verdict:
    """All preflight checks for one node, plus the values later roles use."""
    host_vars, checks = checked_vars(host_vars)
    settings, problems = Settings.from_vars(host_vars)
    checks.extend(problems)
    ctx = Context(facts, host_vars, manifest, settings, _resolved(facts, settings, manifest))
    for check in registry.load():
        checks.extend(check.fn(ctx))
    return Verdict(checks=checks, resolved=ctx.res)


def _resolved(facts: Mapping[str, Any], settings: Settings, manifest: Manifest) -> Resolved:
    """What is known before any check: the OS and kernel, the repository and package names."""
    res = Resolved(driver_source=settings.driver_source)
    os_facts = facts.get("os") or {}
    res.os_key = str(os_facts.get("key") or "")
    res.os_codename = str(os_facts.get("codename") or "")
    res.kernel = str(facts.get("kernel") or "")
    repo = manifest.repository
    res.repo_base_url, res.repo_key_url = repo.base_url, repo.key_url
    res.repo_key_fingerprint, res.repo_pin_priority = repo.key_fingerprint, repo.pin_priority
    pkgs = manifest.packages
    res.packages_default, res.packages_runtime = list(pkgs.default), list(pkgs.runtime)
    res.package_core, res.package_driver = pkgs.core, pkgs.driver
    res.installed_before = dict(facts.get("packages") or {})
    return res
