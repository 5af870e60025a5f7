"""What preflight works with and answers: the settings it reads, the GPUs it found, the values
later roles act on (`Resolved`), the verdict, and the context every family of checks shares."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from r9700ctl.agent import power_budget as power
from r9700ctl.agent.result import FAIL, WARN, CheckResult, finding, one_line
from r9700ctl.judging import Gpu
from r9700ctl.manifest import Manifest, version_key

GB = 1000**3


def check_dict(check: CheckResult) -> dict[str, Any]:
    """A preflight check as the role's facts and doctor's JSON carry it: id, status, detail, fix and
    evidence as before, and its reason code beside them."""
    return {
        "id": check.id,
        "status": check.status,
        "detail": check.detail,
        "fix": check.hint,
        "evidence": check.evidence,
        "code": check.code,
    }


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
    def from_vars(cls, host_vars: Mapping[str, Any]) -> tuple[Settings, list[CheckResult]]:
        """Settings from r9700_* host variables; bad values come back as FAIL checks.

        `host_vars` are checked against the roles' argument specs first (`checked_vars`): a bad
        value is a FAIL there and unset here, so it is reported once.
        """
        problems: list[CheckResult] = []
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
                finding(
                    "settings",
                    FAIL,
                    problem,
                    "correct it in the inventory (see r9700_power's README)",
                    code="SETTINGS_INVALID",
                )
            )
        return s, problems


def checked_vars(host_vars: Mapping[str, Any]) -> tuple[dict[str, Any], list[CheckResult]]:
    """Host variables as the roles take them: Ansible's ArgumentSpecValidator against the roles'
    meta/argument_specs.yml (r9700ctl/variables.py); each bad value is one FAIL with its fix."""
    from r9700ctl import variables

    values, bad = variables.check_values(host_vars)
    return values, [
        finding("settings", FAIL, b.what(), b.fix("in the inventory"), code="SETTINGS_INVALID") for b in bad
    ]


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

    def node_gpus(self) -> list[tuple[str | None, str | None]]:
        """The node's discrete GPUs the manifest knows, as (PCI id, gfx target): what known issues
        and the `auto` release are matched against."""
        return [(g["pci_id"], g["gfx"]) for g in self.gpus if g["discrete"] and g["known"]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Verdict:
    checks: list[CheckResult]
    resolved: Resolved

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def warnings(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == WARN]

    @property
    def ok(self) -> bool:
        return not self.failures

    def refusal(self, host: str) -> str:
        """One line for a refused host: what failed, how to fix it, and that nothing changed."""
        first = self.failures[0]
        more = len(self.failures) - 1
        tail = f" [+{more} more preflight failure{'s' if more > 1 else ''}]" if more else ""
        return f"{host}: preflight refused, nothing changed: {one_line(first)}{tail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "checks": [check_dict(c) for c in self.checks],
            "resolved": self.resolved.to_dict(),
            "ok": self.ok,
        }


@dataclass
class Context:
    """What every family of checks reads and writes: the node's facts, the host variables (checked
    against the roles' specs), the manifest, the settings, the GPUs found and `res`, the values later
    roles act on, which the families fill in as they go (registry.py orders them)."""

    facts: Mapping[str, Any]
    host_vars: Mapping[str, Any]
    manifest: Manifest
    settings: Settings
    res: Resolved
    gpus: list[Gpu] = field(default_factory=list)
    cluster_nic: Any = None  # the node's NIC in r9700_cluster_network (cluster.py), when set

    @property
    def discrete(self) -> list[Gpu]:
        return [g for g in self.gpus if g.discrete]

    @functools.cached_property
    def known(self) -> list[Any]:
        """The known issues (Match) of the node's GPUs with the release resolved (release.py resolves
        it first; environment.py and the known_issues check read them after)."""
        from r9700ctl.known_issues import NodeView, applicable, issues

        if not self.res.rocm_version:
            return []
        node = NodeView(gpus=tuple(self.res.node_gpus()), rocm=self.res.rocm_version)
        return applicable(issues(self.manifest), node)


def newest_first(versions: list[str]) -> list[str]:
    return sorted(versions, key=version_key, reverse=True)
