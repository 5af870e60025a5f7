"""THE environment list: every variable r9700ctl sets for ROCm programs on a node, each with why.

One list per node, computed once by `compose()` inside the preflight judge, so `r9700ctl doctor`
and a provision refuse the same values before anything changes. It reaches the rest as:
  * the host fact `r9700_resolved.environment` (preflight), republished by the r9700_env role as
    `r9700_environment`: a list of {name, value, reason, source}, sorted by name;
  * three files with the same values (r9700_env): /etc/profile.d/r9700.sh (login shells),
    /etc/environment.d/90-r9700.conf (systemd user managers) and
    /etc/systemd/system.conf.d/90-r9700.conf (DefaultEnvironment= of the system manager: every
    system service, dockerd and what it starts);
  * /etc/r9700ctl/node.json (`environment`, and `p2p` with the reason of the P2P choice);
  * consumers such as a container image's ENV read the same fact; nobody recomputes it.

Every variable is checked the same way whichever knob carries it: HSA_OVERRIDE_GFX_VERSION in
r9700_env_extra meets the rule of r9700_hsa_override_gfx_version, HSA_FORCE_FINE_GRAIN_PCIE and
NCCL_P2P_DISABLE the rule of r9700_p2p, ROCR_VISIBLE_DEVICES that of r9700_rocr_visible_devices.

Adding an entry from a rule (a known-issue workaround, say): write a function
`(EnvTarget) -> list[EnvEntry]` and append it to RULES; give each entry a reason a user can act on
and the source (issue, document) that shows the value right. A user's r9700_env / r9700_env_extra
still override rule entries by name (null removes one), and the governed variables above keep
their own rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from r9700ctl import p2p_policy as p2p
from r9700ctl.agent.result import FAIL, PASS, WARN, CheckResult, finding
from r9700ctl.agent.units import GIB
from r9700ctl.judging import HSA_VERSION, Gpu
from r9700ctl.manifest import Manifest

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Values every one of the three files carries literally: no shell quoting problem in profile.d,
# no ${...} expansion in environment.d (environment.d(5)), no %-specifier or quoting in
# DefaultEnvironment= (systemd-system.conf(5)).
VALUE = re.compile(r"^[A-Za-z0-9_.,:/=+@^-]*$")
VALUE_RULE = "letters, digits and _ . , : / = + @ ^ -"

# The knob each governed variable belongs to; the variable in r9700_env(_extra) meets its rule.
HSA_OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"
VISIBLE = "ROCR_VISIBLE_DEVICES"
FINE_GRAIN = "HSA_FORCE_FINE_GRAIN_PCIE"
P2P_DISABLE = "NCCL_P2P_DISABLE"
GOVERNED = {
    HSA_OVERRIDE: "r9700_hsa_override_gfx_version",
    VISIBLE: "r9700_rocr_visible_devices",
    FINE_GRAIN: "r9700_p2p",
    P2P_DISABLE: "r9700_p2p",
}
# What a P2P variable's value asks for, as r9700_p2p writes them: NCCL_P2P_DISABLE=1 switches RCCL's
# P2P transport off, =0 leaves it on (its default). HSA_FORCE_FINE_GRAIN_PCIE=1 is no P2P switch: it
# makes ROCr expose each GPU's VRAM as a fine-grained pool over PCIe (ROCR-Runtime
# src/core/runtime/amd_gpu_agent.cpp, "Expose VRAM as uncached/fine grain over PCIe (if enabled)"),
# and RCCL warns at start-up while it is unset (ROCm/rccl src/init.cc; ROCm/rccl#1026). r9700_p2p
# writes it only with P2P on, so a user who sets it is judged as asking for the P2P-on setup.
P2P_INTENT = {
    (FINE_GRAIN, "1"): "on",
    (FINE_GRAIN, "0"): "off",
    (P2P_DISABLE, "0"): "on",
    (P2P_DISABLE, "1"): "off",
}
VISIBLE_ITEM = re.compile(r"^(\d+|GPU-[0-9A-Za-z]+)$")

# Sources of the values the P2P policy writes.
P2P_ON_SOURCE = (
    "exposes each GPU's VRAM as a fine-grained pool over PCIe (ROCR-Runtime amd_gpu_agent.cpp), which "
    "RCCL warns about when unset (ROCm/rccl src/init.cc); peers reach VRAM only with BAR >= VRAM "
    "(Linux amdkfd Kconfig HSA_AMD_P2P)"
)
P2P_OFF_SOURCE = (
    "RCCL then moves data through host memory; 4x R9700 run with NCCL_P2P_DISABLE=1 (ROCm/rccl-tests#162) "
    "and hang the host with direct P2P (ROCm/rocm-systems#11348)"
)


@dataclass(frozen=True)
class EnvEntry:
    """One variable of the list: NAME=value, why, and which knob or rule put it there."""

    name: str
    value: str
    reason: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "value": self.value, "reason": self.reason, "source": self.source}


@dataclass
class EnvKnobs:
    """The r9700_env role's variables as the judge reads them (defaults: roles/r9700_env/defaults)."""

    env: dict[str, Any] = field(default_factory=dict)
    env_extra: dict[str, Any] = field(default_factory=dict)
    hsa_override: str = ""
    rocr_visible_devices: str = "auto"
    p2p: str = "auto"
    # Comment out the node's own lines that break its GPUs (r9700ctl/nodeenv.py) instead of refusing.
    comment_out_conflicts: bool = False

    @classmethod
    def from_vars(cls, host_vars: Mapping[str, Any]) -> tuple[EnvKnobs, list[CheckResult]]:
        knobs, problems = cls(), []
        # The values passed the roles' argument spec (preflight.checked_vars): r9700_env and
        # r9700_env_extra are mappings by then (Ansible's dict type reads JSON or key=value text).
        for attr, name in (("env", "r9700_env"), ("env_extra", "r9700_env_extra")):
            value = host_vars.get(name)
            if isinstance(value, Mapping):
                setattr(knobs, attr, {str(k): v for k, v in value.items()})
        override = host_vars.get("r9700_hsa_override_gfx_version")
        knobs.hsa_override = "" if override is None else str(override).strip()
        visible = host_vars.get("r9700_rocr_visible_devices")
        if visible is not None:
            knobs.rocr_visible_devices = str(visible).strip()
        mode = host_vars.get("r9700_p2p")
        if mode is not None and mode != "":
            # The value passed the role's argument spec (preflight.checked_vars); YAML reads a
            # bare on/off as a boolean, an INI inventory hands over the text "true"/"false".
            text = str(mode).strip().lower()
            knobs.p2p = {"true": "on", "false": "off"}.get(text, text)
        # A bool after the role's argument spec (preflight.checked_vars); an INI inventory's text too.
        opt_in = host_vars.get("r9700_env_comment_out_conflicts")
        knobs.comment_out_conflicts = str(opt_in).strip().lower() in ("true", "1", "yes", "on")
        return knobs, problems

    def user_values(self) -> dict[str, tuple[str | None, str]]:
        """NAME -> (value or None for 'leave out', the knob it came from); r9700_env_extra wins."""
        merged: dict[str, tuple[str | None, str]] = {}
        for knob, values in (("r9700_env", self.env), ("r9700_env_extra", self.env_extra)):
            for name, value in values.items():
                merged[name] = (None if value is None else _text(value), knob)
        return merged


@dataclass
class EnvTarget:
    """What the node is, as far as the list depends on it."""

    gpus: list[Gpu]
    manifest: Manifest
    p2p_facts: Mapping[str, Any] = field(default_factory=dict)
    visible_auto: str = ""  # ROCR_VISIBLE_DEVICES that keeps ROCm off an integrated GPU ("" = none needed)
    allow_unsupported: bool = False
    rocm_version: str = ""
    # Default workarounds of the node's known issues that preflight decided to apply
    # (r9700ctl/known_issues.py): NAME -> (value, reason, source).
    known_issue_workarounds: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # r9700_cluster_network's NIC on this node ("" = no cluster network) and the r9700_cluster
    # settings (rdma: off|roce, hca, gid_index): r9700ctl/cluster/netcheck.py.
    cluster_interface: str = ""
    cluster: Mapping[str, Any] = field(default_factory=dict)
    # Known issues of the node (its GPU count and release) whose workaround is P2P off: r9700_p2p's
    # `auto` decides off for them, `on` is warned (preflight/release.py p2p_hazards).
    p2p_hazards: list[p2p.KnownHazard] = field(default_factory=list)

    @property
    def discrete(self) -> list[Gpu]:
        return [g for g in self.gpus if g.discrete]


@dataclass
class EnvPlan:
    entries: list[EnvEntry]
    p2p: p2p.Decision
    checks: list[CheckResult]
    hsa_override: str = ""  # the accepted override ("" when none)
    rocr_visible_devices: str = ""

    @property
    def ok(self) -> bool:
        return not any(c.status == FAIL for c in self.checks)

    def to_dicts(self) -> list[dict[str, str]]:
        return [e.to_dict() for e in self.entries]


def known_issue_workarounds(target: EnvTarget) -> list[EnvEntry]:
    """The variables of the known issues' default workarounds (NCCL_PROTO=Simple on 7.2.x, say)."""
    return [EnvEntry(name, *entry) for name, entry in target.known_issue_workarounds.items()]


# Sources of the cluster network's variables.
NCCL_ENV_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
TORCH_DIST_DOC = "https://pytorch.org/docs/stable/distributed.html (Choosing the network interface to use)"


def cluster_network(target: EnvTarget) -> list[EnvEntry]:
    """The cluster NIC for RCCL and gloo, and RCCL's transport: sockets (NCCL_IB_DISABLE=1) or RoCE."""
    if not target.cluster_interface:
        return []
    iface = target.cluster_interface
    entries = [
        # '=' makes NCCL match the name exactly (eth1 would otherwise also take eth10).
        EnvEntry(
            "NCCL_SOCKET_IFNAME",
            f"={iface}",
            "the cluster NIC (it holds this node's address in r9700_cluster_network); left to itself "
            "RCCL takes any interface but docker*/lo, a Docker bridge included (ROCm/legacy-rocm-build#6074)",
            f"r9700_cluster_network; {NCCL_ENV_DOC} (NCCL_SOCKET_IFNAME)",
        ),
        EnvEntry(
            "GLOO_SOCKET_IFNAME",
            iface,
            "gloo (torch's CPU backend, and the rendezvous of many launchers) otherwise binds to the host "
            "name's address, 127.0.1.1 on a Debian install (pytorch/gloo#70)",
            f"r9700_cluster_network; {TORCH_DIST_DOC}",
        ),
    ]
    if str(target.cluster.get("rdma") or "off") == "roce":
        hca, index = str(target.cluster.get("hca") or ""), target.cluster.get("gid_index")
        entries.append(
            EnvEntry(
                "NCCL_IB_HCA",
                f"={hca}",
                "the cluster NIC's RDMA device and port (RoCE)",
                f"r9700_cluster_rdma_hca; {NCCL_ENV_DOC} (NCCL_IB_HCA, '=' exact)",
            )
        )
        entries.append(
            EnvEntry(
                "NCCL_IB_GID_INDEX",
                str(index),
                "the RoCE v2 GID on the cluster subnet (validate --cluster checks it is one)",
                f"r9700_cluster_rdma_gid_index; {NCCL_ENV_DOC} (NCCL_IB_GID_INDEX)",
            )
        )
    else:
        entries.append(
            EnvEntry(
                "NCCL_IB_DISABLE",
                "1",
                "no RDMA on the cluster network (r9700_cluster_rdma: off): "
                "RCCL uses TCP sockets on the cluster NIC instead of probing IB devices",
                f"r9700_cluster_rdma; {NCCL_ENV_DOC} (NCCL_IB_DISABLE)",
            )
        )
    return entries


# Rules that add entries of their own: (target) -> entries.
RULES: list[Callable[[EnvTarget], list[EnvEntry]]] = [known_issue_workarounds, cluster_network]


def compose(knobs: EnvKnobs, target: EnvTarget) -> EnvPlan:
    """The node's environment list and the checks of every value in it."""
    checks: list[CheckResult] = []
    user = knobs.user_values()
    for name, (value, knob) in user.items():
        problem = _syntax_problem(name, value)
        if problem:
            checks.append(
                finding(
                    "env.values",
                    FAIL,
                    f"{knob}: {problem}",
                    f"correct or remove {name} in {knob}",
                    code="ENV_VALUE_INVALID",
                )
            )
    entries: dict[str, EnvEntry] = {}
    for rule in RULES:
        for entry in rule(target):
            entries[entry.name] = entry
    hsa_check, hsa_entry = _hsa_override(knobs, user, target)
    checks.append(hsa_check)
    visible_checks, visible_entry = _visible_devices(knobs, user, target)
    checks.extend(visible_checks)
    decision, p2p_checks, p2p_entries = _p2p(knobs, user, target)
    checks.extend(p2p_checks)
    for name, (value, knob) in user.items():
        if name in GOVERNED:
            continue
        if value is None:
            entries.pop(name, None)
        elif not _syntax_problem(name, value):
            entries[name] = EnvEntry(name, value, f"set in {knob}", knob)
    for entry in (hsa_entry, visible_entry, *p2p_entries):
        if entry is not None:
            entries[entry.name] = entry
    return EnvPlan(
        entries=[entries[name] for name in sorted(entries)],
        p2p=decision,
        checks=checks,
        hsa_override=hsa_entry.value if hsa_entry else "",
        rocr_visible_devices=visible_entry.value if visible_entry else "",
    )


# -- HSA_OVERRIDE_GFX_VERSION -------------------------------------------------------------------------


def _hsa_override(
    knobs: EnvKnobs, user: dict[str, tuple[str | None, str]], target: EnvTarget
) -> tuple[CheckResult, EnvEntry | None]:
    from_env = user.get(HSA_OVERRIDE, (None, ""))
    candidates = [(knobs.hsa_override, GOVERNED[HSA_OVERRIDE])] if knobs.hsa_override else []
    if from_env[0]:
        candidates.append((from_env[0], f"{HSA_OVERRIDE} in {from_env[1]}"))
    if len({value for value, _ in candidates}) > 1:
        said = " and ".join(f"{knob}={value}" for value, knob in candidates)
        return finding(
            "hsa.override",
            FAIL,
            f"two different HSA overrides: {said}",
            "set one of them, or neither",
            code="HSA_OVERRIDE_CONFLICT",
        ), None
    value, knob = candidates[0] if candidates else ("", GOVERNED[HSA_OVERRIDE])
    check = check_hsa_override(value, knob, target.gpus, target.manifest)
    if check.status == FAIL or not value:
        return check, None
    return check, EnvEntry(HSA_OVERRIDE, value, check.detail, knob)


def check_hsa_override(value: str, knob: str, gpus: list[Gpu], manifest: Manifest) -> CheckResult:
    """One rule for HSA_OVERRIDE_GFX_VERSION, whichever knob carries it (only the fix names the knob)."""
    natives = sorted({g.gfx for g in gpus if g.known and g.discrete})
    if not value:
        native = ", ".join(natives) or "the detected GPUs"
        return finding("hsa.override", PASS, f"HSA_OVERRIDE_GFX_VERSION not set (none needed for {native})")
    in_dict = " in " in knob  # "HSA_OVERRIDE_GFX_VERSION in r9700_env_extra"
    fix_remove = f"remove {knob.replace(' in ', ' from ')}" if in_dict else f"remove {knob} (or set it to '')"
    if not HSA_VERSION.match(value):
        return finding(
            "hsa.override",
            FAIL,
            f"HSA_OVERRIDE_GFX_VERSION={value!r} is not major.minor.stepping (e.g. 12.0.1)",
            fix_remove,
            code="HSA_OVERRIDE_MALFORMED",
        )
    if not natives:
        return finding(
            "hsa.override",
            FAIL,
            f"HSA_OVERRIDE_GFX_VERSION={value} with no known AMD GPU to check it against",
            fix_remove,
            code="HSA_OVERRIDE_UNCHECKED",
        )
    named = manifest.gfx_for_hsa_version(value)
    named_family = manifest.gfx_family(named) if named else None
    label = f"{value} is {named} ({named_family})" if named else f"{value} names no target the manifest knows"
    for gfx in natives:
        family = manifest.gfx_family(gfx)
        native_version = manifest.hsa_version(gfx) or ""
        same_family = (
            (named_family == family) if named_family else value.split(".")[0] == native_version.split(".")[0]
        )
        if not same_family:
            return finding(
                "hsa.override",
                FAIL,
                f"cross-family HSA override refused: {label}{_model_names(named, manifest)}, the GPUs here "
                f"are {gfx} ({family}); a cross-family override crashes the driver (ROCm/rocm-systems#3531)",
                fix_remove + f"; {gfx} needs no override",
                code="HSA_OVERRIDE_WRONG_TARGET",
            )
    if all(manifest.hsa_version(g) == value for g in natives):
        detail = f"HSA_OVERRIDE_GFX_VERSION={value} only restates the native target {', '.join(natives)}"
    else:
        detail = (
            f"HSA_OVERRIDE_GFX_VERSION={value} makes ROCm run {named or value} code on {', '.join(natives)}"
        )
    if any(g.known and not g.discrete for g in gpus):
        detail += "; a global override also mislabels the integrated GPU (ROCm/ROCm#5696)"
    return finding(
        "hsa.override",
        WARN,
        detail,
        fix_remove + " unless a program lacks kernels for this target",
        code="HSA_OVERRIDE_SET",
    )


def _model_names(gfx: str | None, manifest: Manifest) -> str:
    if not gfx:
        return ""
    names = sorted({m.name for m in manifest.gpus.values() if m.gfx == gfx})
    return f", the target of {', '.join(names)}" if names else ""


# -- ROCR_VISIBLE_DEVICES ---------------------------------------------------------------------------------


def _visible_devices(
    knobs: EnvKnobs, user: dict[str, tuple[str | None, str]], target: EnvTarget
) -> tuple[list[CheckResult], EnvEntry | None]:
    knob = GOVERNED[VISIBLE]
    from_env = user.get(VISIBLE, (None, ""))
    setting = knobs.rocr_visible_devices
    if from_env[0] is not None and setting not in ("auto", from_env[0]):
        return [
            finding(
                "env.conflict",
                FAIL,
                f"{knob}={setting!r} and {VISIBLE}={from_env[0]} in {from_env[1]} disagree",
                "set ROCR_VISIBLE_DEVICES in one place",
                code="ENV_CONFLICT",
            )
        ], None
    if from_env[0] is not None:
        value, origin, reason = from_env[0], from_env[1], f"set in {from_env[1]}"
    elif setting == "auto":
        value, origin = target.visible_auto, f"{knob}=auto"
        reason = "keeps ROCm on the discrete cards beside an integrated GPU (ROCm/ROCm#5696)"
    else:
        value, origin, reason = setting, knob, f"set in {knob}"
    if not value:
        return [], None
    bad = [item for item in value.split(",") if not VISIBLE_ITEM.match(item.strip())]
    if bad:
        return [
            finding(
                "env.rocr_visible_devices",
                FAIL,
                f"{VISIBLE}={value} ({origin}): {', '.join(bad)} is neither a device index nor a GPU-<uuid>",
                f"list device indices or UUIDs, e.g. 0,1 (in {origin.split('=')[0]})",
                code="ROCR_VISIBLE_DEVICES_INVALID",
            )
        ], None
    return [], EnvEntry(VISIBLE, value, reason, origin)


def container_visible_devices(value: str, amd_gpus: list[str], seen: list[str] | None) -> str:
    """ROCR_VISIBLE_DEVICES for a container that sees only the GPUs at `seen` (PCI addresses; None:
    every GPU, as the host does). `amd_gpus` are the host's AMD GPUs in PCI order, how ROCr numbers
    them on the host (preflight/gpus.py _visible_devices).

    Inside a container given only some render nodes, ROCr numbers only those: the thunk leaves out a
    KFD node whose DRM render node it cannot open ("A sysfs node is not supported - if corresponding
    drm render node is not available", ROCT-Thunk-Interface src/topology.c,
    topology_sysfs_check_node_supported), so a host index past an iGPU that sorts first shifts down.
    Each host index becomes the GPU's position among the seen ones; an index the container cannot
    see is left out; a GPU-<uuid> names the same GPU anywhere (ROCR_VISIBLE_DEVICES takes "device
    indices or UUIDs": ROCm docs, GPU isolation techniques). "" when nothing is left.
    """
    if seen is None:
        return value
    inside = [address for address in amd_gpus if address in set(seen)]
    mapped = []
    for item in (part.strip() for part in value.split(",")):
        if not item.isdigit():
            mapped.append(item)
        elif int(item) < len(amd_gpus) and amd_gpus[int(item)] in inside:
            mapped.append(str(inside.index(amd_gpus[int(item)])))
    return ",".join(mapped)


# -- PCIe peer-to-peer ------------------------------------------------------------------------------------


def _p2p(
    knobs: EnvKnobs, user: dict[str, tuple[str | None, str]], target: EnvTarget
) -> tuple[p2p.Decision, list[CheckResult], list[EnvEntry]]:
    checks: list[CheckResult] = []
    asked: list[tuple[str, str]] = []  # (on|off, knob text)
    if knobs.p2p != "auto":
        asked.append((knobs.p2p, f"r9700_p2p={knobs.p2p}"))
    kept: dict[str, tuple[str, str]] = {}  # user P2P variables that agree with the decision
    for name in (FINE_GRAIN, P2P_DISABLE):
        value, knob = user.get(name, (None, ""))
        if value is None:
            continue
        intent = P2P_INTENT.get((name, value))
        if intent is None:
            checks.append(
                finding(
                    "p2p.policy",
                    FAIL,
                    f"{name}={value} in {knob} is neither 0 nor 1",
                    f"remove {name} from {knob} and set r9700_p2p (auto, on or off)",
                    code="P2P_SETTING_INVALID",
                )
            )
            continue
        asked.append((intent, f"{name}={value} in {knob}"))
        kept[name] = (value, knob)
    if len({intent for intent, _ in asked}) > 1:
        said = " and ".join(text for _, text in asked)
        checks.append(
            finding(
                "p2p.policy",
                FAIL,
                f"P2P asked both on and off: {said}",
                "set r9700_p2p only",
                code="P2P_SETTING_CONFLICT",
            )
        )
        asked = []
    mode, requested_by = asked[0] if asked else ("auto", "r9700_p2p=auto")
    gpus = [p2p.GpuUnderTest(g.address, _vram_bytes(g, target.manifest)) for g in target.discrete]
    decision = p2p.decide(mode, requested_by, gpus, target.p2p_facts, target.p2p_hazards)
    if mode == "on" and decision.blockers:
        status = WARN if target.allow_unsupported else FAIL
        forced = "FORCED by r9700_allow_unsupported: " if target.allow_unsupported else ""
        checks.append(
            finding(
                "p2p.policy",
                status,
                f"{forced}PCIe peer-to-peer refused: {'; '.join(decision.blockers)}; P2P there fails or "
                "hangs the host (ROCm/rocm-systems#11348)",
                f"drop {requested_by} and let r9700_p2p: auto decide per node, or fix what is named",
                code="P2P_REFUSED",
            )
        )
        if status == FAIL:
            decision.enabled = False
    elif mode == "on" and decision.known_issues:
        hazards = [h for h in target.p2p_hazards if h.id in decision.known_issues]
        checks.append(
            finding(
                "p2p.policy",
                WARN,
                f"{requested_by} keeps PCIe peer-to-peer on despite known issues "
                f"{', '.join(decision.known_issues)} of this node: "
                + "; ".join(f"{h.title} ({h.source})" for h in hazards),
                "set r9700_p2p: auto (or off): the issues' workaround is NCCL_P2P_DISABLE=1",
                code="P2P_KNOWN_ISSUES_IGNORED",
            )
        )
    elif not any(c.id == "p2p.policy" for c in checks):
        checks.append(finding("p2p.policy", PASS, f"PCIe peer-to-peer {decision.reason}"))
    entries = []
    if decision.enabled:
        entries.append(EnvEntry(FINE_GRAIN, "1", f"P2P {decision.reason}; {P2P_ON_SOURCE}", requested_by))
    else:
        entries.append(EnvEntry(P2P_DISABLE, "1", f"P2P {decision.reason}; {P2P_OFF_SOURCE}", requested_by))
    chosen = {e.name for e in entries}
    for name, (value, knob) in kept.items():
        if name not in chosen and P2P_INTENT[(name, value)] == ("on" if decision.enabled else "off"):
            entries.append(EnvEntry(name, value, f"set in {knob}; agrees with P2P {decision.reason}", knob))
    return decision, checks, entries


def _vram_bytes(gpu: Gpu, manifest: Manifest) -> int | None:
    """The VRAM the BAR must cover, of this very product (its PCI revision), or None when unknown."""
    spec = manifest.gpu_spec(gpu.pci_id, gpu.revision) if gpu.known else None
    gib = spec.get("vram_gib") if spec else None
    return int(gib * GIB) if isinstance(gib, (int, float)) else None


# -- helpers ---------------------------------------------------------------------------------------------


def _syntax_problem(name: str, value: str | None) -> str:
    if not NAME.match(name):
        return f"{name!r} is not a variable name (letters, digits, _; not starting with a digit)"
    if value is not None and not VALUE.match(value):
        return (
            f"{name}={value!r} holds characters that profile.d, environment.d and systemd would read "
            f"differently; values may use {VALUE_RULE}"
        )
    return ""


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def knob_problems(values: Mapping[str, Any]) -> list[str]:
    """What is wrong with the names and values of r9700_env or r9700_env_extra as given: the
    check `compose` makes on the node's list, run on the controller before a host is contacted
    (r9700ctl/value_rules.py)."""
    return [
        problem
        for name, value in values.items()
        if (problem := _syntax_problem(str(name), None if value is None else _text(value)))
    ]
