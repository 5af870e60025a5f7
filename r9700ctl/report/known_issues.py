"""`r9700ctl known-issues` as text: each issue in short or in full.

The JSON document is `Listing.to_dict()` (schema r9700ctl.known-issues/1). The whole list as
Markdown, `render_markdown()`, is docs/known-issues.md (a test keeps the two equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from r9700ctl.known_issues import issues, signatures

if TYPE_CHECKING:
    from r9700ctl.agent.known_issue_match import KnownIssue
    from r9700ctl.manifest import Manifest


def issue_lines(selected: list[KnownIssue], label: str, rocm: str | None, verbose: bool) -> list[str]:
    """Each issue in short (or in full with `verbose`), then how many there are for the filters."""
    scope = " and ".join(s for s in (label, f"ROCm {rocm}" if rocm else "") if s)
    if not selected:
        return [f"no known issue for {scope}"]
    lines = [line for issue in selected for line in (_full(issue) if verbose else _short(issue))]
    tail = f" for {scope}" if scope else ""
    more = "" if verbose else "; --verbose adds effect, detection and sources"
    return [*lines, f"{len(selected)} known issue(s){tail}{more}"]


def _short(issue: KnownIssue) -> list[str]:
    flags = [name for name, on in (("blocking", issue.blocking), ("false signal", issue.false_signal)) if on]
    default = "applied by default" if issue.applied_by_default else "not applied by provision"
    return [
        issue.id + (f" [{', '.join(flags)}]" if flags else ""),
        f"  {issue.title}",
        f"  applies to {issue.gpus_text()} on {issue.releases_text()}" + _trigger(issue),
        f"  workaround: {_first_sentence(issue.workaround_short())} ({default})",
        "",
    ]


def _full(issue: KnownIssue) -> list[str]:
    w = issue.workaround
    return [
        f"{issue.id}: {issue.title}",
        f"  applies to: {issue.gpus_text()} on {issue.releases_text()}" + _trigger(issue),
        f"  effect: {issue.effect}",
        f"  detection: {' '.join(str(issue.detection.get('how', '')).split())}",
        f"  workaround: {' '.join(str(w.get('advice', '')).split())}",
        f"  applied by provision by default: {'yes' if issue.applied_by_default else 'no'}"
        + (f" (through {issue.policy})" if issue.policy else ""),
        *[f"  source: {url}" for url in issue.sources],
        "",
    ]


def _trigger(issue: KnownIssue) -> str:
    if not issue.trigger_env:
        return ""
    return ", when " + " and ".join(f"{k}={v}" for k, v in issue.trigger_env.items()) + " is set"


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition("; ")
    return head if dot else text


def render_markdown(manifest: Manifest) -> str:
    """docs/known-issues.md: one section per issue with its sources, then the kernel-log signatures."""
    known = issues(manifest)
    lines = [
        "# Known issues",
        "",
        "What owners of R9700 (gfx1201) machines found out the hard way, each with the public threads",
        "that show it, how r9700ctl detects it and the workaround. `r9700ctl provision` applies the",
        "workarounds marked *applied by default* and records in /etc/r9700ctl/node.json which issues",
        "apply to the node; `r9700ctl doctor` lists them per node; `r9700ctl validate` names them in",
        "its hints; `r9700_rocm_version: auto` skips a release where a *blocking* issue applies.",
        "",
        "This page is generated from `r9700ctl/data/manifest.yaml` (`r9700ctl known-issues --markdown`);",
        "edit the manifest, not this page (a test keeps the two equal).",
        "",
        "| id | issue | applies to | releases | workaround | by default |",
        "|---|---|---|---|---|---|",
    ]
    for issue in known:
        lines.append(
            f"| [{issue.id}](#{issue.id}) | {_cell(issue.title)} | {_cell(issue.gpus_text())} | "
            f"{_cell(issue.releases_text())} | {_cell(_table_workaround(issue))} | "
            f"{'yes' if issue.applied_by_default else 'no'} |"
        )
    for issue in known:
        lines += ["", f"## {issue.id}", "", f"**{issue.title}**", ""]
        lines += _applies_lines(issue)
        lines += [f"- **Effect:** {issue.effect}"]
        lines += [f"- **Detection:** {_flat(issue.detection.get('how', ''))} ({_where(issue)})"]
        lines += _workaround_lines(issue)
        lines += ["- **Sources:**"] + [f"  - <{url}>" for url in issue.sources]
    lines += [
        "",
        "## Kernel log signatures",
        "",
        "`r9700ctl doctor` counts these amdgpu lines in a bundle's dmesg.txt per GPU and explains them.",
        "",
        "| kind | severity | code | meaning | action | sources |",
        "|---|---|---|---|---|---|",
    ]
    for sig in signatures(manifest).values():
        links = ", ".join(f"<{u}>" for u in sig.sources)
        severity = "never alone" if sig.severity == "none" else sig.severity
        code = f"[`{sig.code}`](codes.md#kernel-log)"
        lines.append(
            f"| {sig.kind} | {severity} | {code} | {_cell(sig.meaning)} | {_cell(sig.action)} | {links} |"
        )
    return "\n".join(lines) + "\n"


def _table_workaround(issue: KnownIssue) -> str:
    if issue.workaround_env or issue.workaround.get("release"):
        return issue.workaround_short()
    return "advice, see below"


def _applies_lines(issue: KnownIssue) -> list[str]:
    text = f"- **Applies to:** {issue.gpus_text()}; {issue.releases_text()}"
    if issue.trigger_env:
        text += "; when " + " and ".join(f"`{k}={v}`" for k, v in issue.trigger_env.items()) + " is set"
    flags = [name for name, on in (("blocking", issue.blocking), ("false signal", issue.false_signal)) if on]
    return [text + (f" ({', '.join(flags)})" if flags else "")]


def _where(issue: KnownIssue) -> str:
    det = issue.detection
    places = []
    if det.get("preflight"):
        places.append("preflight, from the node's GPUs and release")
    if det.get("bundle"):
        places.append("doctor, in " + ", ".join(det["bundle"]))
    if det.get("detector"):
        places.append(f"detector {det['detector']['name']}")
    if det.get("agent"):
        codes = det["agent"].get("codes") or []
        named = f" with code {', '.join(f'`{c}`' for c in codes)}" if codes else ""
        places.append("validate, checks " + ", ".join(det["agent"]["checks"]) + named)
    return "; ".join(places)


def _workaround_lines(issue: KnownIssue) -> list[str]:
    w = issue.workaround
    lines = [f"- **Workaround:** {_flat(w.get('advice', ''))}"]
    if issue.workaround_env:
        lines.append("  - environment: " + ", ".join(f"`{k}={v}`" for k, v in issue.workaround_env.items()))
    if w.get("release"):
        lines.append(f"  - release: ROCm {w['release']}")
    if w.get("package_pin"):
        lines.append(f"  - package pin: {_flat(w['package_pin'])}")
    by = f" (through `{issue.policy}`)" if issue.policy else ""
    default = "yes" if issue.applied_by_default else "no"
    lines.append(f"  - applied by `r9700ctl provision` by default: {default}{by}")
    return lines


def _flat(text: Any) -> str:
    return " ".join(str(text).split())


def _cell(text: str) -> str:
    return _flat(text).replace("|", "\\|")
