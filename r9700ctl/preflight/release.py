"""The ROCm release: `auto` resolved (or a pin checked) against the node's GPUs, OS and known
issues, its repositories and image, the kernel line AMD lists for it, and the known issues of the
node with the workaround in force for each."""

from __future__ import annotations

from typing import Any

from r9700ctl.agent.result import FAIL, PASS, WARN, CheckResult, finding
from r9700ctl.manifest import Manifest
from r9700ctl.preflight.model import Context, Resolved, Settings
from r9700ctl.preflight.registry import register


@register("rocm", order=40)
def rocm(ctx: Context) -> list[CheckResult]:
    return _check_rocm(ctx.res, ctx.settings, ctx.manifest)


@register("kernel.line", order=45)
def kernel_line(ctx: Context) -> list[CheckResult]:
    return [_check_kernel_line(ctx.res, ctx.settings, ctx.manifest)]


@register("known_issues", order=100)
def known_issue_checks(ctx: Context) -> list[CheckResult]:
    return _check_known_issues(ctx.res, ctx.known, ctx.settings)


def workarounds(ctx: Context) -> dict[str, tuple[str, str, str]]:
    return _workarounds(ctx.known, ctx.settings)


def p2p_hazards(ctx: Context) -> list[Any]:
    return _p2p_hazards(ctx.known, ctx.settings)


def _check_rocm(res: Resolved, settings: Settings, manifest: Manifest) -> list[CheckResult]:
    targets = set(res.gfx_targets)
    working = manifest.releases_supporting(targets, res.os_key)
    target_text = ", ".join(sorted(targets)) or "no detected GPU target"
    wanted = settings.rocm_version
    checks = []
    if wanted == "auto":
        if not working:
            checks.append(
                finding(
                    "rocm.version",
                    FAIL,
                    f"no ROCm release in the manifest supports {target_text} on {res.os_key}",
                    "use a supported OS (" + ", ".join(manifest.os_keys()) + ") or GPU, see the manifest",
                    code="ROCM_NO_RELEASE_FOR_GPU",
                )
            )
            return checks
        from r9700ctl import kernel_lines
        from r9700ctl.known_issues import auto_release, issues

        candidates, by_kernel = kernel_lines.auto_candidates(working, _kernel_node(res, settings), manifest)
        choice = auto_release(issues(manifest), res.node_gpus(), candidates)
        res.rocm_version = choice.release or candidates[-1]
        res.rocm_choice = f"auto -> ROCm {res.rocm_version} (newest supporting {target_text}{by_kernel}" + (
            f"; {choice.skipped_text()})" if choice.skipped else ")"
        )
        if choice.all_blocked:
            blockers = ", ".join(sorted({i.id for _, found in choice.skipped for i in found}))
            checks.append(
                finding(
                    "rocm.version",
                    WARN,
                    f"{res.rocm_choice}; every release supporting {target_text} has a blocking known issue "
                    f"for this node ({blockers})",
                    "see `r9700ctl known-issues` for the workarounds, which provision applies by default",
                    code="ROCM_ALL_RELEASES_BLOCKED",
                )
            )
        else:
            checks.append(finding("rocm.version", PASS, res.rocm_choice))
    else:
        release = manifest.release(wanted)
        known = manifest.release_names()
        if release is None:
            checks.append(
                finding(
                    "rocm.version",
                    FAIL,
                    f"r9700_rocm_version={wanted} is not in the manifest (known: {', '.join(known)})",
                    "set r9700_rocm_version to auto or to one of " + ", ".join(known),
                    code="ROCM_RELEASE_UNKNOWN",
                )
            )
            return checks
        missing = sorted(t for t in targets if not release.supports_gfx(t))
        problems = []
        if missing:
            names = sorted({g["name"] for g in res.gpus if g["gfx"] in missing})
            problems.append(f"ROCm {wanted} does not support {', '.join(missing)} ({', '.join(names)})")
        if res.os_key and not release.suite_for(res.os_key):
            problems.append(f"ROCm {wanted} has no packages for {res.os_key}")
        if problems:
            would = ", ".join(working) if working else "none in the manifest"
            detail = "; ".join(problems) + f"; releases that would work: {would}"
            fix = f"set r9700_rocm_version to one of {would} (or auto)" if working else "see the manifest"
            if settings.allow_unsupported:
                res.rocm_version, res.forced = wanted, True
                checks.append(
                    finding(
                        "rocm.version",
                        WARN,
                        f"FORCED by r9700_allow_unsupported: {detail}",
                        "expect ROCm to fail on these GPUs; " + fix,
                        code="ROCM_RELEASE_FORCED",
                    )
                )
            else:
                checks.append(finding("rocm.version", FAIL, detail, fix, code="ROCM_RELEASE_UNSUPPORTED"))
                return checks
        else:
            res.rocm_version = wanted
            res.rocm_choice = f"ROCm {wanted} (pinned) supports {target_text}"
            checks.append(finding("rocm.version", PASS, res.rocm_choice))

    release = manifest.release(res.rocm_version)
    assert release is not None
    res.suite = release.suite_for(res.os_key) or (res.os_codename if res.forced else "")
    repo = manifest.repository
    res.rocm_repo_path = repo.rocm_path_template.format(rocm_path=release.rocm_path)
    res.amdgpu_repo_path = repo.amdgpu_path_template.format(amdgpu_path=release.amdgpu)
    res.graphics_repo_path = repo.graphics_path(release)
    res.amdgpu_version = release.amdgpu
    res.pytorch_image = release.pytorch_image
    res.pytorch_image_digest = release.pytorch_image_digest
    unlisted = sorted(
        t for t in targets if release.supports_gfx(t) and not release.lists_target_on(t, res.os_key)
    )
    if unlisted and res.os_key in release.os:
        systems = sorted({s for t in unlisted for s in (release.listed_systems(t) or [])})
        note = str((manifest.os_release(res.os_key) or {}).get("radeon_note") or "").strip()
        checks.append(
            finding(
                "rocm.os_listed",
                WARN,
                f"AMD lists {', '.join(unlisted)} for ROCm {res.rocm_version} only on {', '.join(systems)}; "
                f"{res.os_key} is best effort (AMD's {res.os_key} instructions use the {res.suite} packages)"
                + (f". {note}" if note else ""),
                f"for vendor support use {' or '.join(systems)}",
                code="OS_BEST_EFFORT",
            )
        )
    return checks


def _kernel_node(res: Resolved, settings: Settings) -> Any:
    from r9700ctl import kernel_lines

    return kernel_lines.Node(res.kernel, res.os_key, settings.driver_source, frozenset(res.gfx_targets))


def _check_kernel_line(res: Resolved, settings: Settings, manifest: Manifest) -> CheckResult:
    """The running kernel against the lines AMD lists with the resolved release (kernel_lines.py)."""
    from r9700ctl import kernel_lines

    node = _kernel_node(res, settings)
    return kernel_lines.judge(node, res.rocm_version, settings.allow_unsupported, manifest)


def _skipped(issue_id: str, settings: Settings) -> bool:
    return bool({"all", issue_id} & set(settings.known_issue_workarounds_skip))


def _workarounds(found: list[Any], settings: Settings) -> dict[str, tuple[str, str, str]]:
    """The default workarounds' variables for the environment list: NAME -> (value, reason, source).

    Not those r9700_known_issue_workarounds_skip names, nor those a policy variable owns (r9700_p2p
    decides NCCL_P2P_DISABLE from the node's facts).
    """
    entries: dict[str, tuple[str, str, str]] = {}
    for item in found:
        issue = item.issue
        if issue.applied_by_default and not issue.policy and not _skipped(issue.id, settings):
            reason = f"workaround of known issue {issue.id}: {issue.title}"
            for name, value in issue.workaround_env.items():
                entries[name] = (value, reason, issue.sources[0])
    return entries


def _p2p_hazards(found: list[Any], settings: Settings) -> list[Any]:
    """The node's known issues whose default workaround is P2P off through r9700_p2p (the host hang
    of ROCm/rocm-systems#11348 and the IPC failure of ROCm/rccl-tests#162 on 4x R9700, say): `auto`
    weighs them (r9700ctl/p2p_policy.py). `found` already matched the node's GPU count and release; an
    issue named in r9700_known_issue_workarounds_skip is the user's risk and not weighed."""
    from r9700ctl import p2p_policy as p2p

    return [
        p2p.KnownHazard(item.issue.id, item.issue.title, item.issue.sources[0])
        for item in found
        if item.issue.policy == "r9700_p2p"
        and item.issue.applied_by_default
        and item.issue.workaround_env.get("NCCL_P2P_DISABLE") == "1"
        and not _skipped(item.issue.id, settings)
    ]


def _check_known_issues(res: Resolved, found: list[Any], settings: Settings) -> list[CheckResult]:
    """Each known issue of the node with the workaround in force in the environment list, into
    `res.known_issues` (node.json, doctor, the provision summary). A blocking issue on the chosen
    (pinned) release is a warning naming the release `auto` would choose; `auto` never chooses one
    while another release supports the node."""
    env = {e["name"]: e["value"] for e in res.environment}
    knob_of = {e["name"]: e.get("source") or "r9700_env" for e in res.environment}
    checks = []
    for item in found:
        issue = item.issue
        trigger = issue.trigger_env
        if trigger and all(env.get(k) == v for k, v in trigger.items()):
            # The node's own environment list re-creates the issue (a value copied from vLLM's images).
            said = ", ".join(f"{k}={v} ({knob_of[k]})" for k, v in trigger.items())
            checks.append(
                finding(
                    f"known_issue.{issue.id}",
                    WARN,
                    f"the environment list sets {said}, which re-creates known issue {issue.id}: "
                    + issue.title,
                    f"remove it from {', '.join(sorted({knob_of[k] for k in trigger}))} "
                    f"(the default workaround is {issue.workaround_short()}); see {issue.sources[0]}",
                    code="KNOWN_ISSUE_TRIGGERED",
                )
            )
        wanted = issue.workaround_env
        if wanted and all(env.get(k) == v for k, v in wanted.items()):
            in_force = "in force: " + ", ".join(f"{k}={v}" for k, v in wanted.items())
            in_force += f" (through {issue.policy})" if issue.policy else ""
        elif wanted and _skipped(issue.id, settings):
            in_force = "not applied (r9700_known_issue_workarounds_skip)"
        elif wanted and issue.policy:
            in_force = f"not in force: {issue.policy} {res.p2p.get('reason', 'decided otherwise')}"
        elif wanted:
            said = ", ".join(f"{k}={env[k]}" for k in wanted if k in env) or "unset"
            in_force = f"not in force: the environment list has {said} (r9700_env)"
        else:
            in_force = "advice only"
        res.known_issues.append(
            {
                "id": issue.id,
                "title": issue.title,
                "blocking": issue.blocking,
                "false_signal": issue.false_signal,
                "workaround": issue.workaround_short(),
                "workaround_env": wanted,
                "in_force": in_force,
                "source": issue.sources[0],
            }
        )
        if issue.blocking:
            better = issue.workaround.get("release")
            checks.append(
                finding(
                    f"known_issue.{issue.id}",
                    WARN,
                    f"ROCm {res.rocm_version} has known issue {issue.id} on {item.gpus} "
                    f"{'/'.join(res.gfx_targets)} GPU(s): {issue.title}; workaround {in_force}",
                    (f"set r9700_rocm_version to {better} or auto to avoid it; " if better else "")
                    + f"see {issue.sources[0]}",
                    code="KNOWN_ISSUE_APPLIES",
                )
            )
    if found:
        listed = "; ".join(f"{k['id']} ({k['in_force']})" for k in res.known_issues)
        checks.append(finding("known_issues", PASS, f"known issues of this node: {listed}"))
    return checks
