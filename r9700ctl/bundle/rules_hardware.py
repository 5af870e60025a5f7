"""Rules about the hardware: GPUs found and seen by ROCm, an iGPU beside the cards, the IOMMU mode,
BAR sizes, PCIe links trained below their maximum, and ACS redirecting peer traffic."""

from __future__ import annotations

from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.result import PASS
from r9700ctl.agent.units import GIB
from r9700ctl.bundle.files import Diagnosis, evidence_in, p2p_switched_off
from r9700ctl.bundle.gpus import GPU_SOURCES, ROCM_SOURCES
from r9700ctl.bundle.model import AMD, FAIL, NOTE, NVIDIA, WARN, Evidence


def rule_gpus_found(d: Diagnosis) -> None:
    """Files that list GPUs but list none; AMD cards on the PCI bus that ROCm does not list.

    A rocminfo that stopped before listing any agent (/dev/kfd closed, the runtime failing) lists
    nothing either way: it is no evidence that no GPU is seated, nor that ROCm cannot see a card
    lspci shows (rule_rocm_runtime reports why it stopped).
    """
    from r9700ctl.bundle.rules_software import rocminfo_stopped

    stopped = rocminfo_stopped(d)
    skipped = {"rocminfo.txt"} if stopped is not None else set()
    listing = [n for n in GPU_SOURCES if d.bundle.has(n) and n not in skipped]
    if stopped is not None and not listing and not d.gpus:
        d.cannot_judge(
            "which GPUs the node has",
            "rocminfo.txt",
            because=f"rocminfo stopped before listing any agent ({stopped.failure}) and no other file "
            "lists the GPUs (lspci.txt would)",
        )
        return
    if listing and not d.gpus:
        d.add(
            "gpu.none",
            FAIL,
            f"no GPU found in {', '.join(listing)}",
            fix="check that the cards are seated and powered and appear in `lspci -nn | grep -i -e vga -e "
            "display`",
            evidence=[Evidence(n, None) for n in listing],
            code="GPU_MISSING",
        )
        return
    rocm_files = [n for n in ROCM_SOURCES if d.bundle.has(n) and n not in skipped]
    if not d.bundle.has("lspci.txt") or not rocm_files:
        return
    on_bus = [g for g in d.amd_gpus if "lspci.txt" in g.seen_in]
    unseen = [g for g in on_bus if not any(f in g.seen_in for f in rocm_files)]
    rocminfo_count = sum(1 for g in d.amd_gpus if "rocminfo.txt" in g.seen_in)
    if rocm_files == ["rocminfo.txt"] and rocminfo_count >= len(on_bus):
        return  # rocminfo without BDFID names no address: only the counts can be compared
    for gpu in unseen:
        d.add(
            "gpu.not_visible_to_rocm",
            FAIL,
            f"{gpu.name or gpu.pci_id} at {gpu.bdf} is on the PCI bus but not in {', '.join(rocm_files)}",
            fix="check that amdgpu bound to it (lspci -k: 'Kernel driver in use: amdgpu') and dmesg for its "
            "probe errors; a card the manifest does not list may need a newer ROCm",
            evidence=[gpu.evidence] if gpu.evidence else [],
            code="GPU_NOT_VISIBLE_TO_ROCM",
        )


def rule_integrated_gpu(d: Diagnosis) -> None:
    """An iGPU beside discrete cards is one more ROCm device: programs pick it, a global override mislabels "
    "it."""
    igpus = [g for g in d.gpus if g.discrete is False and g.vendor != NVIDIA]
    if not igpus or not d.amd_gpus:
        return
    for igpu in igpus:
        d.add(
            "gpu.integrated_beside_discrete",
            WARN,
            f"an integrated GPU ({igpu.name or '?'}, {igpu.gfx or igpu.pci_id or '?'} at {igpu.bdf or '?'}) "
            f"sits beside {len(d.amd_gpus)} discrete card(s): ROCm lists it as a device too",
            # AMD's prerequisites: disable an IGP in the BIOS; hidden by environment variable, the
            # runtime may still crash (preflight.IGPU_SOURCE). Hiding it is the stopgap, not the fix.
            fix="disable the integrated GPU in the BIOS/UEFI setup (AMD: ROCm does not support integrated "
            "graphics and may crash even when told to omit it); until then set ROCR_VISIBLE_DEVICES to "
            "the discrete GPUs (r9700ctl provision does); never set HSA_OVERRIDE_GFX_VERSION for the "
            "whole machine (ROCm/ROCm#5696)",
            evidence=[igpu.evidence] if igpu.evidence else [],
            code="IGPU_BESIDE_DISCRETE",
        )


def rule_unknown_models(d: Diagnosis) -> None:
    for gpu in d.amd_gpus:
        if gpu.pci_id and d.manifest.gpu(gpu.pci_id) is None:
            d.add(
                "gpu.unknown_model",
                NOTE,
                # device_targets may name it (its gfx target), but it is no model with figures
                f"{gpu.pci_id} ({gpu.name or 'unnamed'}) at {gpu.bdf or '?'} is not a model in r9700ctl's "
                "manifest",
                fix="nothing to do for the diagnosis; support and thresholds for it are not r9700ctl's",
                evidence=[gpu.evidence] if gpu.evidence else [],
                code="GPU_MODEL_UNKNOWN",
            )


def cmdline_of(d: Diagnosis) -> Any:
    from r9700ctl.agent.parsers import cmdline

    return d.bundle.parsed("cmdline.txt", cmdline.parse) if d.bundle.has("cmdline.txt") else None


def rule_iommu(d: Diagnosis) -> None:
    """The IOMMU mode from the command line, judged by the agent's rule (agent/rules/iommu.py)."""
    from r9700ctl.agent.rules import iommu

    params = cmdline_of(d)
    if params is None:
        d.cannot_judge("the IOMMU mode", "cmdline.txt")
        return
    if not params.tokens:
        return  # empty or unreadable: reported as unreadable
    facts = iommu.IommuFacts(
        gpus=len(d.amd_gpus),
        passthrough_param=params.iommu_passthrough or params.amd_iommu == "pt",
        disabled_param=params.iommu_disabled,
    )
    verdict = iommu.judge(facts)
    if verdict.status == PASS:
        d.versions.setdefault("iommu", verdict.mode.split(" ")[0])
        return
    d.add(
        "kernel.iommu_not_passthrough",
        verdict.status,
        verdict.reason,
        fix=codes.next_step(verdict.code),
        evidence=[evidence_in(d.bundle, "cmdline.txt", r"^[^#\s]")],
        code=verdict.code,
    )


def rule_pcie(d: Diagnosis) -> None:
    if not d.amd_relevant:
        return
    if not d.bundle.has("lspci.txt"):
        d.cannot_judge("ACS, BAR sizes and PCIe link training", "lspci.txt")
        _note_amdsmi_links(d)
        return
    from r9700ctl.agent.parsers import lspci

    report = d.bundle.parsed("lspci.txt", lspci.parse)
    gpus = [f for f in getattr(report, "functions", None) or [] if f.is_display and f.vendor_id == AMD]
    if not gpus:
        return
    _judge_bars(d, gpus)
    if any(f.capabilities_denied for f in gpus):
        d.cannot_judge(
            "PCIe link training and ACS",
            "lspci.txt",
            because="lspci ran without root ('Capabilities: <access denied>'); record `sudo lspci -vvv -nn`",
        )
        _note_amdsmi_links(d)
        return
    _judge_links(d, report, gpus)
    _judge_acs(d, report, gpus)


def _judge_bars(d: Diagnosis, gpus: list[Any]) -> None:
    """Large BAR, by the agent's rule (agent/rules/bar.py) against the model's nominal VRAM."""
    from r9700ctl.agent.rules import bar

    for function in gpus:
        spec = d.manifest.gpu_spec(function.pci_id, function.revision) if function.pci_id else None
        if spec is None or not spec.get("discrete", True) or not spec.get("vram_gib"):
            continue  # an unknown product's VRAM is not guessed from a neighbour's
        verdict = bar.judge(function.largest_prefetchable_bar_bytes, int(spec["vram_gib"]) * GIB)
        if verdict.status != FAIL:
            continue  # a BAR the file does not show is not judged here
        d.add(
            "pcie.small_bar",
            verdict.status,
            f"{function.bdf} ({spec['name']}): {verdict.reason}",
            fix=codes.next_step(verdict.code),
            evidence=[
                evidence_in(d.bundle, "lspci.txt", r"prefetchable", function.first_line, function.last_line)
            ],
            code=verdict.code,
        )


def _judge_links(d: Diagnosis, report: Any, gpus: list[Any]) -> None:
    """Each card's link as the agent judges it (agent/checks/pcie.judge_link), read at the card's
    upstream port against what both ends support (the lower of the card's and the slot's maximum).
    A bundle is recorded at idle, where links downtrain to save power: that is a note (INFO), not a
    warning, and so is a slot that limits the card ("the platform limits this card to Gen4 x16");
    a card whose own maximum is below its model's is a WARN."""
    from r9700ctl.agent.rules.link import judge_link
    from r9700ctl.agent.sysfs import GEN_BY_SPEED

    speed_of_gen = {gen: speed for speed, gen in GEN_BY_SPEED.items()}
    for gpu in gpus:
        link, at = _card_link(report, gpu)
        if link is None:
            continue
        # The model's expected link, as the agent's thresholds take it from the manifest (pcie_gen/width).
        model = d.manifest.gpu(gpu.pci_id) if gpu.pci_id else None
        spec = model.raw if model else {}
        verdict = judge_link(
            link,
            speed_of_gen.get(spec.get("pcie_gen")),
            spec.get("pcie_width"),
            under_load=False,
            idle_status=PASS,
        )
        if verdict.status == PASS and not verdict.reason:
            continue
        status = WARN if verdict.status == WARN else NOTE
        d.add(
            "pcie.link_below_max",
            status,
            f"PCIe link of GPU {gpu.bdf} (read at {at.bdf}): {verdict.reason}",
            fix="compare under load (r9700ctl validate reads the link during a copy)"
            if status == NOTE
            else "check the slot, riser and the BIOS link settings",
            evidence=[evidence_in(d.bundle, "lspci.txt", r"LnkSta:", at.first_line, at.last_line)],
            code=verdict.code,
        )


def _card_link(report: Any, gpu: Any) -> tuple[Any, Any]:
    """(agent Link, function read) for a GPU: its card's upstream port, as agent/sysfs.read_link picks it."""
    from r9700ctl.agent.sysfs import Link

    rest = list(report.upstream_of(gpu.bdf))  # nearest first
    at = gpu
    while rest and rest[0].vendor_id == gpu.vendor_id:  # the card's own switch ports
        at = rest.pop(0)
    slot = rest[0] if rest else None
    cur, cap = at.link_status, at.link_cap
    if cur is None or cap is None:
        return None, at
    slot_cap = slot.link_cap if slot is not None else None
    return (
        Link(
            cur_speed_gts=cur.speed_gts,
            cur_width=cur.width,
            max_speed_gts=cap.speed_gts,
            max_width=cap.width,
            at=at.bdf,
            slot_port=slot.bdf if slot is not None else "",
            slot_max_speed_gts=slot_cap.speed_gts if slot_cap else None,
            slot_max_width=slot_cap.width if slot_cap else None,
        ),
        at,
    )


def _note_amdsmi_links(d: Diagnosis) -> None:
    """Without lspci's link registers, amd-smi's trained link beside the maximum it lists: a note,
    never a verdict. The link a card is judged against is what both ends support, and amd-smi
    shows neither the slot's capability nor the card's own: its maximum is the GPU function's,
    behind the card's switch (a recorded RX 6600 lists x16; Navi 23 "physically only features a
    PCI-Express 4.0 x8 bus interface", techpowerup.com/review/amd-radeon-rx-6600-xt-pci-express-scaling),
    and a bundle is recorded at idle, where links downtrain. A WARN here cried wolf on healthy cards.
    """
    from r9700ctl.agent.parsers import amdsmi

    names = [n for n in ("amd-smi-static.json", "amd-smi-metric.json") if d.bundle.has(n)]
    reports = [r for r in (d.bundle.parsed(n, amdsmi.parse) for n in names) if r is not None]
    for gpu in amdsmi.merge(*reports) if reports else []:
        speed, width = gpu.pcie_speed_gts, gpu.pcie_width
        max_speed, max_width = gpu.pcie_max_speed_gts, gpu.pcie_max_width
        if speed is None or width is None or max_speed is None or max_width is None:
            continue
        if speed >= max_speed and width >= max_width:
            continue
        d.add(
            "pcie.link_below_max",
            NOTE,
            f"PCIe link of GPU {gpu.bdf or gpu.index} at {speed:g} GT/s x{width}, below the "
            f"{max_speed:g} GT/s x{max_width} amd-smi lists as its maximum: not judged, since amd-smi shows "
            "neither the slot's capability nor the card's own link (the maximum it lists is the GPU "
            "function's, behind the card's switch) and idle links downtrain",
            fix="record `sudo lspci -vvv -nn` for the card's link and its slot's, or compare under load "
            "(r9700ctl validate reads the link during a copy)",
            evidence=[evidence_in(d.bundle, "amd-smi-metric.json", r'"width"')],
            code="PCIE_LINK_BELOW_MAX_UNJUDGED",
        )


def _link(state: Any) -> str:
    if state is None:
        return "?"
    speed = f"{state.speed_gts:g} GT/s" if state.speed_gts else "? GT/s"
    return f"{speed} x{state.width or '?'}"


def _judge_acs(d: Diagnosis, report: Any, gpus: list[Any]) -> None:
    """ACS redirect between GPUs, by the agent's rule (agent/rules/acs.py) on lspci's ACSCtl: it
    matters only on the ports of a switch two GPUs share; one finding per redirecting port."""
    from r9700ctl.agent.rules import acs

    if len(gpus) < 2:
        return
    params = cmdline_of(d)
    paths = {g.bdf: [b.bdf for b in reversed(report.upstream_of(g.bdf))] + [g.bdf] for g in gpus}
    states = {}
    for path in paths.values():
        for port in path[:-1]:
            bridge = report.by_bdf(port)
            states[port] = acs.PortAcs(tuple(bridge.acs_redirects) if bridge is not None else ())
    p2p_off = p2p_switched_off(d)
    verdict = acs.judge(
        paths, states, noacs_param=params is not None and params.pci_noacs, p2p_off=p2p_off is not None
    )
    for port, pairs in verdict.redirecting.items():
        bridge = report.by_bdf(port)
        evidence = [evidence_in(d.bundle, "lspci.txt", r"ACSCtl:", bridge.first_line, bridge.last_line)]
        detail = (
            f"ACS on switch port {port} redirects peer requests ({', '.join(verdict.flags[port])}) between "
            f"GPUs {', '.join(pairs)}: their peer-to-peer traffic goes up through the root complex"
        )
        if p2p_off is not None:
            # These GPUs are not expected to talk P2P (r9700_p2p decided off, or the user did): a note.
            detail += f"; P2P is off on this node ({p2p_off[0]}=1 in env.txt), so only if it is turned on"
            evidence.append(p2p_off[1])
        d.add(
            "pcie.acs_redirect",
            verdict.status,
            detail,
            codes.next_step(acs.CODE, port=port),
            evidence,
            code=acs.CODE,
        )


def rule_aer(d: Diagnosis) -> None:
    """PCIe AER counters since boot on each AMD GPU's path up to its root port (aer.txt).

    The same rule as the agent's before/after check (r9700ctl/agent/aer_counters.py), over the whole
    uptime: an uncorrectable (nonfatal or fatal) error is a FAIL, corrected errors a WARN.
    """
    from r9700ctl.agent import aer_counters as aer
    from r9700ctl.agent.parsers import aer as aer_parser

    if not d.bundle.has("aer.txt"):
        if d.amd_gpus:
            d.cannot_judge("PCIe errors (AER counters)", "aer.txt")
        return
    report = d.bundle.parsed("aer.txt", aer_parser.parse)
    if report is None or report.error:
        return  # the parse error is already a "could not read" finding
    if not report.devices:
        if d.amd_gpus:
            d.cannot_judge(
                "PCIe errors (AER counters)",
                "aer.txt",
                because="no device exposes AER counters (AER off in the firmware, or a kernel before 4.19)",
            )
        return
    lines = d.bundle.lines("aer.txt")
    for gpu in d.amd_gpus:
        device = report.devices.get(gpu.bdf or "")
        if device is None:
            d.cannot_judge(
                f"PCIe errors of {gpu.bdf or '?'}", "aer.txt", because="aer.txt has no counters for it"
            )
            continue
        path = [*device.path, device.address]
        roles = {address: "port" for address in path}
        roles[path[0]] = "root port"
        roles[device.address] = "GPU"
        shot = aer.Snapshot({device.address: {a: report.devices[a] for a in path if a in report.devices}})
        verdict = aer.judge(device.address, aer.increases(aer.Snapshot(), shot), None, roles)
        if verdict.status == aer.PASS:
            continue
        evidence = [
            Evidence("aer.txt", number, line)
            for number, line in enumerate(lines, 1)
            if "TOTAL_ERR_" in line
            and any(f"/{a}/aer_dev_" in line for a in path)
            and not line.rstrip().endswith(" 0")
        ]
        d.add(
            "pcie.aer",
            FAIL if verdict.status == FAIL else WARN,
            f"{verdict.summary} since boot",
            fix=codes.next_step(verdict.code),
            evidence=evidence,
            code=verdict.code,
        )
