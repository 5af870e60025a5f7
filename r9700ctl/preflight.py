"""Judge a node's raw facts before anything is changed on it (pure: no I/O).

One implementation for both entry points: the r9700_preflight role's action plugin and
``r9700ctl doctor`` gather facts with r9700ctl/agent/nodefacts.py on the node, then call
`judge(facts, host_vars, manifest)` here. The answer is a list of checks (id, status,
detail, fix) and the values later roles act on (`Resolved`): the ROCm release resolved
from ``auto``, the apt suite and repository paths, the GPU targets, the accepted HSA
override. A FAIL anywhere means the host is refused and nothing is changed on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from r9700ctl.agent import power_budget as power
from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN
from r9700ctl.judging import Check, Gpu
from r9700ctl.manifest import AMD_PCI_VENDOR, Manifest, version_key

GB = 1000**3
# "ROCm doesn't currently support integrated graphics. Should your system have an AMD IGP installed,
# disable it in the BIOS prior to using ROCm. If the driver can enumerate the IGP, the ROCm runtime
# may crash the system, even if told to omit it via HIP_VISIBLE_DEVICES."
IGPU_SOURCE = "https://rocm.docs.amd.com/projects/install-on-linux/en/docs-6.2.0/install/amdgpu-install.html"


@dataclass
class Settings:
    """The host variables the judge reads, coerced from Ansible's loose types."""

    rocm_version: str = "auto"
    allow_unsupported: bool = False
    expected_gpus: int | None = None
    min_free_gb: float = 30.0
    driver_source: str = "dkms"
    apt_lock_timeout: float = 600.0
    apply_runtime: str = "auto"
    known_issue_workarounds_skip: tuple[str, ...] = ()  # issue ids, or "all"
    # r9700_power's interface, judged here so a PSU budget is refused before anything changes.
    power_cap_w: float | None = None
    power_cap_w_by_gpu: dict[str, float] = field(default_factory=dict)
    psus: list[power.Psu] = field(default_factory=list)
    psu_margin: float = power.DEFAULT_MARGIN

    @classmethod
    def from_vars(cls, host_vars: Mapping[str, Any]) -> tuple[Settings, list[Check]]:
        """Settings from r9700_* host variables; bad values come back as FAIL checks.

        `host_vars` are checked against the roles' argument specs first (`checked_vars`): a bad
        value is a FAIL there and unset here, so it is reported once.
        """
        problems: list[Check] = []
        s = cls()

        def get(name: str) -> Any:
            value = host_vars.get(name)
            return None if value == "" else value

        if get("r9700_rocm_version") is not None:
            s.rocm_version = str(host_vars["r9700_rocm_version"]).strip()
        if get("r9700_allow_unsupported") is not None:
            s.allow_unsupported = bool(get("r9700_allow_unsupported"))
        if get("r9700_expected_gpus") is not None:
            s.expected_gpus = int(get("r9700_expected_gpus"))
        if get("r9700_min_free_gb") is not None:
            s.min_free_gb = float(get("r9700_min_free_gb"))
        if get("r9700_apt_lock_timeout") is not None:
            s.apt_lock_timeout = float(get("r9700_apt_lock_timeout"))
        if get("r9700_driver_source") is not None:
            s.driver_source = str(get("r9700_driver_source"))
        runtime = get("r9700_apply_runtime")
        if runtime is not None:  # the spec's choices: auto, true, false (YAML's or text)
            s.apply_runtime = str(runtime).lower()
        skip = get("r9700_known_issue_workarounds_skip")
        if skip is not None:
            s.known_issue_workarounds_skip = tuple(str(item).strip() for item in skip if str(item).strip())
        s.power_cap_w, s.power_cap_w_by_gpu, cap_problems = power.parse_caps(
            host_vars.get("r9700_power_cap_w"), host_vars.get("r9700_power_cap_w_by_gpu")
        )
        s.psus, psu_problems = power.parse_psus(host_vars.get("r9700_psus"))
        s.psu_margin, margin_problems = power.parse_margin(host_vars.get("r9700_psu_margin"))
        for problem in cap_problems + psu_problems + margin_problems:
            problems.append(
                Check("settings", FAIL, problem, "correct it in the inventory (see r9700_power's README)")
            )
        return s, problems


def checked_vars(host_vars: Mapping[str, Any]) -> tuple[dict[str, Any], list[Check]]:
    """Host variables as the roles take them: Ansible's ArgumentSpecValidator against the roles'
    meta/argument_specs.yml (r9700ctl/variables.py); each bad value is one FAIL with its fix."""
    from r9700ctl import variables

    values, bad = variables.check_values(host_vars)
    return values, [Check("settings", FAIL, b.what(), b.fix("in the inventory")) for b in bad]


@dataclass
class Resolved:
    """What later roles act on; published to Ansible as the host fact ``r9700_resolved``."""

    os_key: str = ""
    os_codename: str = ""
    kernel: str = ""
    rocm_version: str = ""
    forced: bool = False
    suite: str = ""
    rocm_repo_path: str = ""
    amdgpu_repo_path: str = ""
    graphics_repo_path: str = ""  # "" for releases without the graphics repository (before 7.0)
    amdgpu_version: str = ""
    gfx_targets: list[str] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    discrete_gpus: int = 0
    igpu_present: bool = False
    rocr_visible_devices: str = ""
    hsa_override_gfx_version: str = ""
    # THE environment list ({name, value, reason, source}, by name) and the P2P decision behind
    # part of it: r9700ctl/envlist.py, r9700ctl/p2p_policy.py.
    environment: list[dict[str, str]] = field(default_factory=list)
    p2p: dict[str, Any] = field(default_factory=dict)
    driver_source: str = "dkms"
    driver_loaded: bool = False
    driver_version: str = ""
    runtime: bool = False
    modules_extra: bool = False
    headers_package: str = ""
    modules_extra_package: str = ""
    repo_base_url: str = ""
    repo_key_url: str = ""
    repo_key_fingerprint: str = ""
    repo_pin_priority: int = 600
    packages_default: list[str] = field(default_factory=list)
    packages_runtime: list[str] = field(default_factory=list)
    package_core: str = "rocm-core"
    package_driver: str = "amdgpu-dkms"
    pytorch_image: str = ""
    pytorch_image_digest: str = ""
    installed_before: dict[str, str | None] = field(default_factory=dict)
    # How the release was chosen ("auto -> 7.1.1; skipped 7.2.3: known issue ..."), and the known
    # issues that apply with it, each with the workaround in force in `environment`
    # (_check_known_issues; their default workarounds' variables are entries of `environment`).
    rocm_choice: str = ""
    known_issues: list[dict[str, Any]] = field(default_factory=list)
    # Lines of the node's own environment files ({path, line, name, value}) that break its GPUs and
    # that r9700_env comments out, keeping a backup (r9700_env_comment_out_conflicts; nodeenv.py).
    node_environment_fixes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Verdict:
    checks: list[Check]
    resolved: Resolved

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status == WARN]

    @property
    def ok(self) -> bool:
        return not self.failures

    def refusal(self, host: str) -> str:
        """One line for a refused host: what failed, how to fix it, and that nothing changed."""
        first = self.failures[0]
        more = len(self.failures) - 1
        tail = f" [+{more} more preflight failure{'s' if more > 1 else ''}]" if more else ""
        return f"{host}: preflight refused, nothing changed: {first.one_line()}{tail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "checks": [asdict(c) for c in self.checks],
            "resolved": self.resolved.to_dict(),
            "ok": self.ok,
        }


def judge(facts: Mapping[str, Any], host_vars: Mapping[str, Any], manifest: Manifest) -> Verdict:
    """All preflight checks for one node, plus the values later roles use."""
    host_vars, checks = checked_vars(host_vars)
    settings, problems = Settings.from_vars(host_vars)
    checks.extend(problems)
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

    for error in facts.get("errors") or []:
        checks.append(Check("facts", WARN, f"while gathering facts: {error}"))

    checks.append(_check_os(res, manifest))
    gpus = _gpus(facts, manifest)
    res.gpus = [asdict(g) for g in gpus]
    discrete = [g for g in gpus if g.discrete]
    res.discrete_gpus = len(discrete)
    res.gfx_targets = sorted({g.gfx for g in discrete if g.known})
    res.igpu_present = any(g.known and not g.discrete for g in gpus) and bool(discrete)
    checks.extend(_check_gpus(gpus, settings, facts))
    checks.extend(_check_rocm(res, settings, manifest))
    checks.append(_check_kernel_line(res, settings, manifest))
    known = _known_issues(res, manifest)
    checks.append(_check_lock(facts))
    checks.extend(_check_kernel_packages(res, settings, facts, manifest))
    checks.extend(_check_disk(settings, facts))
    checks.append(_check_secure_boot(settings, facts))
    checks.append(_check_driver(res, settings, facts))
    checks.extend(_check_power(settings, discrete, manifest))

    if settings.apply_runtime == "auto":
        res.runtime = facts.get("service_manager") == "systemd"
    else:
        res.runtime = settings.apply_runtime == "true"
    workarounds = _workarounds(known, settings)
    hazards = _p2p_hazards(known, settings)
    cluster_checks, cluster_nic = _check_cluster(facts, host_vars)
    checks.extend(cluster_checks)
    environment = _compose_environment(
        res, settings, gpus, facts, host_vars, manifest, workarounds, hazards, cluster_nic
    )
    checks.extend(environment)
    checks.extend(_check_known_issues(res, known, settings))
    return Verdict(checks=checks, resolved=res)


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
) -> list[Check]:
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
        cluster=netcheck_settings(host_vars),
    )
    plan = envlist.compose(knobs, target)
    res.environment = plan.to_dicts()
    res.p2p = plan.p2p.to_dict()
    res.hsa_override_gfx_version = plan.hsa_override
    res.rocr_visible_devices = plan.rocr_visible_devices
    own = nodeenv.judge(facts.get("environment_sources"), plan, target, knobs.comment_out_conflicts)
    res.node_environment_fixes = own.fixes
    return problems + plan.checks + own.checks


def _check_cluster(facts: Mapping[str, Any], host_vars: Mapping[str, Any]) -> tuple[list[Check], Any]:
    """r9700_cluster_network: refuse a node with no address in it, warn on a loopback host name or a
    clock far from the controller's (r9700ctl/cluster/netcheck.py, pure)."""
    from r9700ctl.cluster import netcheck

    findings, nic = netcheck.judge(facts.get("net") or {}, host_vars, facts.get("controller_clock"))
    return [Check(f.id, f.status, f.detail, f.fix) for f in findings], nic


def netcheck_settings(host_vars: Mapping[str, Any]) -> dict[str, Any]:
    from r9700ctl.cluster import netcheck

    return netcheck.settings(host_vars)


def _check_os(res: Resolved, manifest: Manifest) -> Check:
    known = manifest.os_keys()
    if not res.os_key:
        return Check("os.release", FAIL, "could not tell the OS release from /etc/os-release", _os_fix(known))
    if res.os_key not in known:
        return Check("os.release", FAIL, f"{res.os_key} is not a system the roles install on", _os_fix(known))
    return Check(
        "os.release", PASS, f"{res.os_key} ({res.os_codename or 'no codename'}), kernel {res.kernel}"
    )


def _os_fix(known: list[str]) -> str:
    return "install one of " + ", ".join(known) + " on this node"


def _gpus(facts: Mapping[str, Any], manifest: Manifest) -> list[Gpu]:
    gpus = []
    for dev in (facts.get("pci") or {}).get("devices") or []:
        vendor = str(dev.get("vendor", "")).lower().removeprefix("0x")
        if vendor != AMD_PCI_VENDOR:
            continue
        pci_id = f"{vendor}:{str(dev.get('device', '')).lower().removeprefix('0x')}"
        address, revision = str(dev.get("address", "")), str(dev.get("revision") or "")
        spec = manifest.gpu_spec(pci_id, revision)
        if spec is None:
            gpus.append(Gpu(address, pci_id, "unknown AMD GPU", "", True, False, revision))
        else:
            discrete = bool(spec.get("discrete", True))
            gpus.append(Gpu(address, pci_id, str(spec["name"]), str(spec["gfx"]), discrete, True, revision))
    return sorted(gpus, key=lambda g: g.address)


def _describe(gpus: list[Gpu]) -> str:
    counts: dict[str, int] = {}
    for g in gpus:
        label = f"{g.name} ({g.gfx})" if g.known else f"{g.name} {g.pci_id}"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n}x {label}" for label, n in counts.items())


def _check_gpus(gpus: list[Gpu], settings: Settings, facts: Mapping[str, Any]) -> list[Check]:
    source = (facts.get("pci") or {}).get("source", "sysfs")
    checks = []
    discrete = [g for g in gpus if g.discrete]
    if not discrete:
        status = WARN if settings.allow_unsupported else FAIL
        checks.append(
            Check(
                "gpu.detected",
                status,
                f"no discrete AMD GPU found (PCI vendor 0x1002, display class, from {source})",
                "check that the cards are seated, powered and enabled in the firmware (lspci -nn -d 1002:)",
            )
        )
    else:
        checks.append(Check("gpu.detected", PASS, f"{_describe(discrete)} (from {source})"))
    unknown = [g for g in gpus if not g.known]
    if unknown:
        checks.append(
            Check(
                "gpu.known",
                WARN,
                f"AMD display device(s) not in the manifest: {', '.join(g.pci_id for g in unknown)}",
                "add the model to r9700ctl/data/manifest.yaml (gpus) with its gfx target and source",
            )
        )
    igpus = [g for g in gpus if g.known and not g.discrete]
    if igpus and discrete:
        checks.append(
            Check(
                "gpu.igpu",
                WARN,
                f"integrated {igpus[0].name} at {igpus[0].address} beside discrete cards: AMD says ROCm does "
                "not support integrated graphics and may crash the system if the driver can enumerate it, "
                "even when told to omit it by environment variable; ROCR_VISIBLE_DEVICES is set to the "
                "discrete cards meanwhile",
                "disable the integrated GPU in the BIOS/UEFI setup (AMD's ROCm installation prerequisites)",
                {"source": IGPU_SOURCE},
            )
        )
    if settings.expected_gpus is None:
        checks.append(
            Check("gpu.count", SKIP, f"r9700_expected_gpus not set; found {len(discrete)} discrete GPU(s)")
        )
    elif len(discrete) == settings.expected_gpus:
        checks.append(
            Check("gpu.count", PASS, f"{len(discrete)} discrete GPU(s), as r9700_expected_gpus says")
        )
    else:
        checks.append(
            Check(
                "gpu.count",
                FAIL,
                f"found {len(discrete)} discrete AMD GPU(s), "
                f"r9700_expected_gpus says {settings.expected_gpus}",
                "reseat or power the missing cards and check the firmware's PCIe settings, "
                "or correct r9700_expected_gpus",
            )
        )
    return checks


def _check_rocm(res: Resolved, settings: Settings, manifest: Manifest) -> list[Check]:
    targets = set(res.gfx_targets)
    working = manifest.releases_supporting(targets, res.os_key)
    target_text = ", ".join(sorted(targets)) or "no detected GPU target"
    wanted = settings.rocm_version
    checks = []
    if wanted == "auto":
        if not working:
            checks.append(
                Check(
                    "rocm.version",
                    FAIL,
                    f"no ROCm release in the manifest supports {target_text} on {res.os_key}",
                    "use a supported OS (" + ", ".join(manifest.os_keys()) + ") or GPU, see the manifest",
                )
            )
            return checks
        from r9700ctl import kernel_lines  # kernel_lines imports this module's Check
        from r9700ctl.known_issues import auto_release, issues

        candidates, by_kernel = kernel_lines.auto_candidates(working, _kernel_node(res, settings), manifest)
        choice = auto_release(issues(manifest), _node_gpus(res), candidates)
        res.rocm_version = choice.release or candidates[-1]
        res.rocm_choice = f"auto -> ROCm {res.rocm_version} (newest supporting {target_text}{by_kernel}" + (
            f"; {choice.skipped_text()})" if choice.skipped else ")"
        )
        if choice.all_blocked:
            blockers = ", ".join(sorted({i.id for _, found in choice.skipped for i in found}))
            checks.append(
                Check(
                    "rocm.version",
                    WARN,
                    f"{res.rocm_choice}; every release supporting {target_text} has a blocking known issue "
                    f"for this node ({blockers})",
                    "see `r9700ctl known-issues` for the workarounds, which provision applies by default",
                )
            )
        else:
            checks.append(Check("rocm.version", PASS, res.rocm_choice))
    else:
        release = manifest.release(wanted)
        known = manifest.release_names()
        if release is None:
            checks.append(
                Check(
                    "rocm.version",
                    FAIL,
                    f"r9700_rocm_version={wanted} is not in the manifest (known: {', '.join(known)})",
                    "set r9700_rocm_version to auto or to one of " + ", ".join(known),
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
                    Check(
                        "rocm.version",
                        WARN,
                        f"FORCED by r9700_allow_unsupported: {detail}",
                        "expect ROCm to fail on these GPUs; " + fix,
                    )
                )
            else:
                checks.append(Check("rocm.version", FAIL, detail, fix))
                return checks
        else:
            res.rocm_version = wanted
            res.rocm_choice = f"ROCm {wanted} (pinned) supports {target_text}"
            checks.append(Check("rocm.version", PASS, res.rocm_choice))

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
            Check(
                "rocm.os_listed",
                WARN,
                f"AMD lists {', '.join(unlisted)} for ROCm {res.rocm_version} only on {', '.join(systems)}; "
                f"{res.os_key} is best effort (AMD's {res.os_key} instructions use the {res.suite} packages)"
                + (f". {note}" if note else ""),
                f"for vendor support use {' or '.join(systems)}",
            )
        )
    return checks


def _kernel_node(res: Resolved, settings: Settings) -> Any:
    from r9700ctl import kernel_lines  # kernel_lines imports this module's Check

    return kernel_lines.Node(res.kernel, res.os_key, settings.driver_source, frozenset(res.gfx_targets))


def _check_kernel_line(res: Resolved, settings: Settings, manifest: Manifest) -> Check:
    """The running kernel against the lines AMD lists with the resolved release (kernel_lines.py)."""
    from r9700ctl import kernel_lines  # kernel_lines imports this module's Check

    node = _kernel_node(res, settings)
    return kernel_lines.judge(node, res.rocm_version, settings.allow_unsupported, manifest)


def _node_gpus(res: Resolved) -> list[tuple[str | None, str | None]]:
    return [(g["pci_id"], g["gfx"]) for g in res.gpus if g["discrete"] and g["known"]]


def _known_issues(res: Resolved, manifest: Manifest) -> list[Any]:
    """The known issues (Match) of the node's GPUs with the chosen release."""
    from r9700ctl.known_issues import NodeView, applicable, issues

    if not res.rocm_version:
        return []
    return applicable(issues(manifest), NodeView(gpus=tuple(_node_gpus(res)), rocm=res.rocm_version))


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


def _check_known_issues(res: Resolved, found: list[Any], settings: Settings) -> list[Check]:
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
                Check(
                    f"known_issue.{issue.id}",
                    WARN,
                    f"the environment list sets {said}, which re-creates known issue {issue.id}: "
                    + issue.title,
                    f"remove it from {', '.join(sorted({knob_of[k] for k in trigger}))} "
                    f"(the default workaround is {issue.workaround_short()}); see {issue.sources[0]}",
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
                Check(
                    f"known_issue.{issue.id}",
                    WARN,
                    f"ROCm {res.rocm_version} has known issue {issue.id} on {item.gpus} "
                    f"{'/'.join(res.gfx_targets)} GPU(s): {issue.title}; workaround {in_force}",
                    (f"set r9700_rocm_version to {better} or auto to avoid it; " if better else "")
                    + f"see {issue.sources[0]}",
                )
            )
    if found:
        listed = "; ".join(f"{k['id']} ({k['in_force']})" for k in res.known_issues)
        checks.append(Check("known_issues", PASS, f"known issues of this node: {listed}"))
    return checks


def _check_lock(facts: Mapping[str, Any]) -> Check:
    lock = facts.get("apt_lock") or {}
    holders = lock.get("holders") or []
    waited = lock.get("waited_s", 0)
    if holders:
        who = "; ".join(f"pid {h['pid']} ({h['command']}) holds {h['file']}" for h in holders)
        return Check(
            "apt.lock",
            FAIL,
            f"dpkg/apt lock still held after waiting {waited:g} s: {who}",
            "let that process finish or stop it (e.g. systemctl stop unattended-upgrades), then rerun; "
            "r9700_apt_lock_timeout sets how long preflight waits",
            {"holders": holders},
        )
    seen = lock.get("seen_holders") or []
    if seen:
        who = ", ".join(f"pid {h['pid']} ({h['command']})" for h in seen)
        return Check("apt.lock", PASS, f"waited {waited:g} s for {who} to release the dpkg/apt lock")
    return Check("apt.lock", PASS, "no process holds the dpkg/apt locks")


def _check_kernel_packages(
    res: Resolved, settings: Settings, facts: Mapping[str, Any], manifest: Manifest
) -> list[Check]:
    apt = facts.get("apt") or {}
    res.headers_package = str(apt.get("headers_package") or f"linux-headers-{res.kernel}")
    res.modules_extra_package = str(apt.get("modules_extra_package") or f"linux-modules-extra-{res.kernel}")
    packages = apt.get("packages") or {}
    headers = packages.get(res.headers_package) or {}
    extra = packages.get(res.modules_extra_package) or {}
    os_entry = manifest.os_release(res.os_key) or {}
    wants_extra = bool(os_entry.get("modules_extra"))
    res.modules_extra = wants_extra and bool(extra.get("candidate") or extra.get("installed"))
    if settings.driver_source != "dkms":
        return [
            Check(
                "kernel.headers",
                SKIP,
                f"not needed: r9700_driver_source={settings.driver_source} builds nothing",
            )
        ]
    checks = []
    update = facts.get("apt_update") or {}
    stale = "" if update.get("ok") is not False else f" (apt-get update failed: {update.get('detail', '')})"
    if not apt.get("available", True):
        checks.append(
            Check("kernel.headers", WARN, "apt-cache is missing: cannot tell whether kernel headers exist")
        )
    elif apt.get("error"):
        checks.append(
            Check(
                "kernel.headers",
                WARN,
                f"apt could not answer ({apt['error']}): cannot tell whether {res.headers_package} exists",
                "fix the apt source it names; r9700_repos removes legacy AMD one-line sources, "
                "a frequent cause",
            )
        )
    elif headers.get("installed") or headers.get("candidate"):
        version = headers.get("installed") or headers.get("candidate")
        state = "installed" if headers.get("installed") else "candidate"
        checks.append(Check("kernel.headers", PASS, f"{res.headers_package} {state} {version}"))
    else:
        checks.append(
            Check(
                "kernel.headers",
                FAIL,
                f"{res.headers_package} has no apt candidate{stale}: "
                f"DKMS cannot build amdgpu for the running kernel {res.kernel}",
                "upgrade the kernel and reboot into it (the new one has headers), "
                f"or add an apt mirror that carries {res.headers_package}",
            )
        )
    if not wants_extra:
        checks.append(
            Check("kernel.modules_extra", SKIP, f"{res.os_key} has no linux-modules-extra packages")
        )
    elif res.modules_extra:
        checks.append(Check("kernel.modules_extra", PASS, f"{res.modules_extra_package} available"))
    elif apt.get("available", True):
        checks.append(
            Check(
                "kernel.modules_extra",
                WARN,
                f"{res.modules_extra_package} has no apt candidate (common on cloud kernels)",
                "install the generic kernel flavour if amdgpu-dkms reports missing modules",
            )
        )
    return checks


def _check_disk(settings: Settings, facts: Mapping[str, Any]) -> list[Check]:
    checks = []
    need = settings.min_free_gb
    for mount, free in (facts.get("disk") or {}).items():
        check_id = "disk.root" if mount == "/" else f"disk.{mount.strip('/').replace('/', '_')}"
        if free is None:
            checks.append(Check(check_id, WARN, f"could not read free space on {mount}"))
        elif free < need * GB:
            checks.append(
                Check(
                    check_id,
                    FAIL,
                    f"only {free / GB:.1f} GB free on {mount}, need {need:g} GB (r9700_min_free_gb)",
                    f"free space on {mount} (apt-get clean, old kernels, logs) or lower r9700_min_free_gb",
                )
            )
        else:
            checks.append(Check(check_id, PASS, f"{free / GB:.1f} GB free on {mount} (need {need:g} GB)"))
    return checks


def _check_secure_boot(settings: Settings, facts: Mapping[str, Any]) -> Check:
    """Under Secure Boot, amdgpu loads only if signed with an enrolled key: the one DKMS signs with."""
    sb = facts.get("secure_boot") or {}
    state = sb.get("state", "unknown")
    if settings.driver_source != "dkms":
        return Check(
            "secureboot",
            SKIP,
            f"Secure Boot {state}; r9700_driver_source={settings.driver_source} builds nothing",
        )
    if state == "unknown":
        return Check(
            "secureboot",
            WARN,
            f"Secure Boot state unknown ({sb.get('detail', '')})",
            "check with 'mokutil --sb-state'",
        )
    if state != "enabled":
        return Check("secureboot", PASS, f"Secure Boot {state.replace('_', ' ')}")
    signing = facts.get("dkms_signing") or {}
    os_id = str((facts.get("os") or {}).get("id") or "")
    key, cert = signing.get("key", ""), signing.get("certificate", "")
    if not key or not cert:  # facts of an older nodefacts: say so rather than guess a key
        return Check("secureboot", WARN, "Secure Boot is enabled; DKMS's signing key was not reported")
    signs = f"DKMS signs amdgpu with {key} + {cert} ({signing.get('origin', '')})"
    other_ways = "; or disable Secure Boot in the firmware setup; or use r9700_driver_source: inbox"
    if not (signing.get("key_exists") and signing.get("certificate_exists")):
        return Check(
            "secureboot",
            FAIL,
            f"Secure Boot is enabled and {key} / {cert} do not exist yet: DKMS would make a new key at "
            "build time that the firmware does not trust, and the kernel would refuse amdgpu",
            _make_and_enroll(os_id, key, cert) + other_ways,
            {"signing": dict(signing)},
        )
    enrolled = signing.get("enrolled")
    said = signing.get("mokutil", "")
    if enrolled == "enrolled":
        return Check("secureboot", PASS, f"Secure Boot enabled; {signs}, enrolled ({said})")
    if enrolled == "pending":
        return Check(
            "secureboot",
            WARN,
            f"Secure Boot enabled; {signs}, enrollment requested but not confirmed ({said})",
            "at the next boot choose 'Enroll MOK' in the blue MOK Manager screen and type the password "
            "given to mokutil --import",
        )
    if enrolled == "unknown":
        return Check(
            "secureboot",
            WARN,
            f"Secure Boot enabled; {signs}; whether it is enrolled is unknown ({said})",
            f"install mokutil and run: mokutil --test-key {cert}",
        )
    return Check(
        "secureboot",
        FAIL,
        f"Secure Boot is enabled and {signs}, which the firmware does not trust ({said or enrolled}): "
        "the kernel would refuse amdgpu",
        _enroll(os_id, cert) + other_ways,
        {"signing": dict(signing)},
    )


def _enroll(os_id: str, cert: str) -> str:
    """How to enroll DKMS's certificate on this OS (then confirm it in MOK Manager at the next boot)."""
    if os_id == "ubuntu" and cert == "/var/lib/shim-signed/mok/MOK.der":
        command = "sudo update-secureboot-policy --enroll-key"
    else:
        command = f"sudo mokutil --import {cert}"
    return f"enroll it: {command}, reboot and choose 'Enroll MOK' in the MOK Manager screen"


def _make_and_enroll(os_id: str, key: str, cert: str) -> str:
    if os_id == "ubuntu" and cert == "/var/lib/shim-signed/mok/MOK.der":
        make = "sudo update-secureboot-policy --new-key"
    else:  # the command dkms itself runs (dkms.in prepare_mok), so the key is where DKMS looks
        make = (
            "sudo openssl req -new -x509 -nodes -days 36500 -subj '/CN=DKMS module signing key' "
            f"-newkey rsa:2048 -keyout {key} -addext extendedKeyUsage=codeSigning -outform DER -out {cert}"
        )
    return f"create the key first ({make}), then {_enroll(os_id, cert)}"


def _check_driver(res: Resolved, settings: Settings, facts: Mapping[str, Any]) -> Check:
    amdgpu = facts.get("amdgpu") or {}
    loaded = bool(amdgpu.get("loaded"))
    version = amdgpu.get("version") or ""
    res.driver_loaded, res.driver_version = loaded, version
    kind = (
        f"AMD's DKMS amdgpu {version}"
        if amdgpu.get("dkms") and version
        else "the kernel's own (inbox) amdgpu"
    )
    dkms_pkg = (facts.get("packages") or {}).get(res.package_driver)
    if settings.driver_source == "present":
        if not loaded:
            return Check(
                "driver.existing",
                FAIL,
                "r9700_driver_source=present but no amdgpu driver is loaded",
                "load a working amdgpu first, or set r9700_driver_source: dkms to install AMD's",
            )
        return Check("driver.existing", PASS, f"keeping {kind} (r9700_driver_source=present)")
    if settings.driver_source == "inbox":
        if dkms_pkg:
            return Check(
                "driver.existing",
                WARN,
                f"{res.package_driver} {dkms_pkg} is installed: its module, not the inbox one, loads at boot",
                f"remove {res.package_driver} for the inbox driver, or use r9700_driver_source: dkms",
            )
        state = f"{kind} loaded" if loaded else "amdgpu not loaded yet"
        return Check(
            "driver.existing", PASS, f"{state}; using the kernel's own driver (r9700_driver_source=inbox)"
        )
    if not loaded:
        return Check(
            "driver.existing", PASS, f"no amdgpu loaded; installing {res.package_driver} {res.amdgpu_version}"
        )
    if amdgpu.get("dkms"):
        return Check("driver.existing", PASS, f"{kind} loaded; the manifest's driver is {res.amdgpu_version}")
    return Check(
        "driver.existing",
        PASS,
        f"{kind} loaded; AMD's DKMS driver {res.amdgpu_version} replaces it after a reboot",
    )


def _check_power(settings: Settings, gpus: list[Gpu], manifest: Manifest) -> list[Check]:
    """Caps name GPUs of this node; each PSU's GPUs at their caps plus its host share fit its rating.

    A GPU without a cap draws up to its board power (the default cap: 300 W for an R9700,
    the manifest's board_power_w); the r9700_power role later checks each cap against the card's
    own range from amd-smi.
    """
    addresses = [g.address for g in gpus]
    caps, problems = power.plan_caps(settings.power_cap_w, settings.power_cap_w_by_gpu, addresses)
    checks = [
        Check("power.caps", FAIL, p, "correct r9700_power_cap_w_by_gpu in the inventory") for p in problems
    ]
    if not settings.psus:
        checks.append(Check("power.psu", SKIP, "r9700_psus not set: no PSU budget to check"))
        return checks
    draw: dict[str, float | None] = {}
    for gpu in gpus:
        # This very product's board power (an R9600D shares the R9700's PCI id): None when unknown.
        spec = manifest.gpu_spec(gpu.pci_id, gpu.revision) or {}
        rated = spec.get("board_power_w")
        draw[gpu.address] = caps.get(gpu.address, float(rated) if isinstance(rated, (int, float)) else None)
    present = set(addresses)
    fed = {a for psu in settings.psus for a in psu.gpus}
    for psu in settings.psus:
        missing = [a for a in psu.gpus if a not in present]
        if missing:
            checks.append(
                Check(
                    f"power.psu.{psu.name}",
                    FAIL,
                    f"r9700_psus.{psu.name} feeds {', '.join(missing)}, not a GPU of this node "
                    f"(GPUs: {', '.join(addresses) or 'none'})",
                    "list the PCI addresses `lspci -d 1002: -D` shows for this node",
                )
            )
            continue
        line = power.budget_line(psu, draw, settings.psu_margin)
        checks.append(
            Check(f"power.psu.{psu.name}", line.status, line.detail, line.fix, {"budget": line.to_dict()})
        )
    unfed = [a for a in addresses if a not in fed]
    if unfed:
        checks.append(
            Check(
                "power.psu.unassigned",
                WARN,
                f"{', '.join(unfed)} is fed by no PSU in r9700_psus: its draw is in no budget",
                "add it to the gpus of the PSU whose cables feed it",
            )
        )
    return checks


def _visible_devices(gpus: list[Gpu]) -> str:
    """Indices of the discrete cards among AMD GPUs in PCI order (how KFD numbers its agents)."""
    return ",".join(str(i) for i, g in enumerate(gpus) if g.discrete)


def newest_first(versions: list[str]) -> list[str]:
    return sorted(versions, key=version_key, reverse=True)
