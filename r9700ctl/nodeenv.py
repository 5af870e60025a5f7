"""The node's own environment files, held to the rules of the environment list (pure: facts in).

r9700ctl writes ONE environment list (r9700ctl/envlist.py) into its own files, but a node may set
the same variables elsewhere: /etc/environment (pam_env: every login session), /etc/environment.d
(systemd user managers), /etc/profile.d (login shells) and the users' ~/.bash_profile, ~/.profile and
~/.bashrc (bash(1) INVOCATION). nodefacts.read_environment_sources reports, with file and line,
each line there that sets a governed variable; this module judges each value by the rule its knob
meets in the list, so a node whose /etc/environment carries the article's
HSA_OVERRIDE_GFX_VERSION=9.4.2 is refused by provision's preflight and by doctor alike, before
anything changes, with the file, the line and the fix. With r9700_env_comment_out_conflicts the
refused lines become warnings and the r9700_env role comments them out, keeping a backup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, CheckResult, finding
from r9700ctl.envlist import (
    FINE_GRAIN,
    GOVERNED,
    HSA_OVERRIDE,
    P2P_DISABLE,
    VISIBLE,
    VISIBLE_ITEM,
    EnvPlan,
    EnvTarget,
)
from r9700ctl.judging import Gpu

CHECK_ID = "env.node_sources"
OPT_IN = "r9700_env_comment_out_conflicts"
# AMD's ROCm install prerequisites: if the driver can enumerate an AMD iGPU, "the ROCm runtime may
# crash the system" (preflight.IGPU_SOURCE).
IGPU_SAID = "AMD says the ROCm runtime may crash the system where it can enumerate one"


def fact_args(host_vars: Mapping[str, Any], login_user: str | None) -> dict[str, Any]:
    """nodefacts' arguments for the sources: whose start files to read, and which variables.

    root, the users that get the GPUs (r9700_users; empty means the user Ansible logs in as, as
    r9700_access does) and the docker users (r9700_docker_users): the ones whose shells run ROCm.
    """

    def names(value: Any) -> list[str]:
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else []

    users = names(host_vars.get("r9700_users")) or ([login_user] if login_user else [])
    everyone = ["root", *users, *names(host_vars.get("r9700_docker_users"))]
    return {"env_users": list(dict.fromkeys(everyone)), "env_names": list(GOVERNED)}


@dataclass
class NodeSources:
    """The verdict on the node's own files: checks, and the lines r9700_env comments out (opt-in)."""

    checks: list[CheckResult]
    fixes: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Setting:
    path: str
    line: int
    name: str
    value: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def said(self) -> str:
        return f"{self.where} sets {self.name}={self.value}"


def judge(
    sources: Mapping[str, Any] | None, plan: EnvPlan, target: EnvTarget, comment_out: bool
) -> NodeSources:
    """One check per setting that conflicts with the list (FAIL where it breaks the GPUs), else a PASS."""
    if not sources:
        return NodeSources(
            [
                finding(
                    CHECK_ID, SKIP, "the node's own environment files were not read", code="NODE_ENV_NOT_READ"
                )
            ]
        )
    checks: list[CheckResult] = []
    fixes: list[dict[str, Any]] = []
    quiet: list[Setting] = []
    for error in sources.get("errors") or []:
        checks.append(
            finding(
                CHECK_ID,
                WARN,
                f"could not read {error}: its variables are not judged",
                code="NODE_ENV_UNREADABLE",
            )
        )
    for raw in sources.get("settings") or []:
        setting = Setting(
            str(raw["path"]), int(raw["line"]), str(raw["name"]), str(raw["value"]), str(raw["text"])
        )
        status, detail, fix = _verdict(setting, plan, target)
        if status == PASS:
            quiet.append(setting)
            continue
        evidence = {"path": setting.path, "line": setting.line, "text": setting.text}
        if status == FAIL and comment_out:
            status, detail = WARN, f"{detail}; provision comments it out ({OPT_IN}), keeping a backup"
            fix = f"nothing to do: r9700_env keeps the old {setting.path} beside it"
            fixes.append(
                {"path": setting.path, "line": setting.line, "name": setting.name, "value": setting.value}
            )
        elif status == FAIL:
            # Short: provision's summary shows a refusal's first 300 characters (runner._first_line).
            fix = f"delete or comment out that line, or set {OPT_IN}: true (provision then comments it out)"
        checks.append(finding(CHECK_ID, status, detail, fix, evidence, code="NODE_ENV_CONFLICT"))
    if not checks:
        read = len(sources.get("read") or [])
        agree = "; ".join(f"{s.said()} without conflict" for s in quiet)
        said = f"the node's own environment files ({read} read) set no governed variable against the "
        checks.append(finding(CHECK_ID, PASS, said + "environment list" + (f" ({agree})" if agree else "")))
    return NodeSources(checks, fixes)


def _verdict(setting: Setting, plan: EnvPlan, target: EnvTarget) -> tuple[str, str, str]:
    """(status, detail, fix) of one setting; PASS when it agrees with the list or changes nothing."""
    if any(mark in setting.value for mark in ("$", "`")):
        return (
            WARN,
            f"{setting.where} sets {setting.name}, which is set at run time ({setting.value}): not judged",
            f"check what it expands to; r9700ctl's rules for {setting.name} apply to the value",
        )
    judge_one = {
        HSA_OVERRIDE: _override,
        VISIBLE: _visible,
        P2P_DISABLE: _p2p_disable,
        FINE_GRAIN: _fine_grain,
    }.get(setting.name)
    return judge_one(setting, plan, target) if judge_one else (PASS, "", "")


def _override(setting: Setting, plan: EnvPlan, target: EnvTarget) -> tuple[str, str, str]:
    from r9700ctl.envlist import check_hsa_override

    if setting.value == plan.hsa_override:
        return PASS, "", ""
    rule = check_hsa_override(
        setting.value, f"{HSA_OVERRIDE} in {setting.path}", target.gpus, target.manifest
    )
    if rule.status == PASS:  # an empty value: the override is unset
        return PASS, "", ""
    named = target.manifest.gfx_for_hsa_version(setting.value)
    if rule.status == FAIL and named:
        # The rule's verdict, short enough that provision's one-line refusal keeps the fix; a
        # cross-family override crashes the driver (ROCm/rocm-systems#3531).
        natives = ", ".join(sorted({g.gfx for g in target.gpus if g.known and g.discrete}))
        return (
            FAIL,
            f"{setting.said()}: cross-family HSA override refused ({named}; these GPUs: {natives})",
            "",
        )
    fix = "remove it unless a program lacks kernels for this target (set r9700_hsa_override_gfx_version then)"
    return rule.status, f"{setting.said()}: {rule.detail}", fix


def _visible(setting: Setting, plan: EnvPlan, target: EnvTarget) -> tuple[str, str, str]:
    items = [item.strip() for item in setting.value.split(",")]
    bad = [item for item in items if not VISIBLE_ITEM.match(item)]
    if bad:
        return FAIL, f"{setting.said()}: {', '.join(bad)} is neither a device index nor a GPU-<uuid>", ""
    gpus: list[Gpu] = target.gpus  # every AMD GPU in PCI order: how ROCr numbers them (preflight)
    for index in (int(item) for item in items if item.isdigit()):
        if index >= len(gpus):
            last = f" (0-{len(gpus) - 1})" if gpus else ""
            return (
                FAIL,
                f"{setting.said()}, which names no GPU at index {index}: "
                f"this node has {len(gpus)} AMD GPUs{last}",
                "",
            )
        if gpus[index].known and not gpus[index].discrete:
            return (
                FAIL,
                f"{setting.said()}: index {index} is the integrated GPU at {gpus[index].address}; "
                + IGPU_SAID,
                "",
            )
    if setting.value != plan.rocr_visible_devices:
        listed = f"{VISIBLE}={plan.rocr_visible_devices}" if plan.rocr_visible_devices else f"no {VISIBLE}"
        return _differs(setting, listed, "set it once, in r9700_rocr_visible_devices, and remove the line")
    return PASS, "", ""


def _differs(setting: Setting, listed: str, fix: str) -> tuple[str, str, str]:
    """A value that does not break the GPUs but is not what the environment list says: a warning."""
    return WARN, f"{setting.said()}, which differs from the environment list's {listed}", fix


def _p2p_disable(setting: Setting, plan: EnvPlan, target: EnvTarget) -> tuple[str, str, str]:
    decision = plan.p2p
    if decision.enabled and setting.value == "1":
        return (
            WARN,
            f"{setting.said()}, switching RCCL's P2P transport off where this node's P2P is "
            + decision.reason,
            "set r9700_p2p: off instead if P2P should be off everywhere, and remove the line",
        )
    if not decision.enabled and setting.value != "1" and (decision.known_issues or decision.blockers):
        # What decided "off" breaks the node with P2P on: a host hang, an IPC failure, a small BAR.
        return (
            FAIL,
            f"{setting.said()}, turning RCCL's P2P transport back on where this node's P2P is "
            + decision.reason,
            "",
        )
    if not decision.enabled and setting.value != "1" and decision.mode == "off":
        return (
            WARN,
            f"{setting.said()}, turning RCCL's P2P transport back on where r9700_p2p says off",
            "remove the line, or set r9700_p2p to what you want",
        )
    return PASS, "", ""


def _fine_grain(setting: Setting, plan: EnvPlan, target: EnvTarget) -> tuple[str, str, str]:
    """No P2P switch (ROCr's fine-grained VRAM pool over PCIe, issue 22 item 9): judged only where the
    list sets it, with P2P on."""
    listed = next((e.value for e in plan.entries if e.name == FINE_GRAIN), None)
    if listed is not None and setting.value != listed:
        return _differs(setting, f"{FINE_GRAIN}={listed} (P2P on)", "remove the line")
    return PASS, "", ""
