"""`r9700ctl known-issues`: what R9700 owners found out, with sources, detection and workarounds."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from r9700ctl.cli.app import Application
from r9700ctl.cli.options import check_json_path, write_json_output
from r9700ctl.errors import BadInput

if TYPE_CHECKING:
    from r9700ctl.agent.known_issues import KnownIssue


@click.command("known-issues")
@click.option(
    "--gpu",
    metavar="ID",
    help="Only issues of this GPU: a PCI id (1002:7551), a gfx target (gfx1201) or part of a model "
    "name (R9700).",
)
@click.option("--rocm", metavar="VERSION", help="Only issues seen on this ROCm release (7.2.3, 7.1).")
@click.option(
    "--json",
    "json_path",
    metavar="PATH",
    help="Also write the list as JSON (schema r9700ctl.known-issues/1) to PATH; '-' prints it "
    "instead of the table.",
)
@click.option(
    "--markdown",
    is_flag=True,
    help="Print the whole list as Markdown (docs/known-issues.md is this output); takes no filter.",
)
@click.option(
    "--verbose", "-v", is_flag=True, help="Each issue in full: effect, detection, workaround, sources."
)
@click.pass_obj
def known_issues(
    app: Application, gpu: str | None, rocm: str | None, json_path: str | None, markdown: bool, verbose: bool
) -> None:
    """List the known issues of R9700 (gfx1201) nodes: each with its public sources, what it
    applies to (GPUs, ROCm releases, environment, GPU count), its effect, how r9700ctl detects
    it and the workaround, and whether provision applies that workaround by default.

    \b
    The same entries drive the rest of the tool: `r9700_rocm_version: auto` skips a release
    with a blocking issue for the node's GPUs, provision applies default workarounds and
    records them in /etc/r9700ctl/node.json, doctor lists the issues of each node, validate
    names them in its hints. Nothing is contacted.

    \b
    Examples:
      r9700ctl known-issues
      r9700ctl known-issues --gpu 1002:7551 --rocm 7.2.3
      r9700ctl known-issues --gpu gfx1201 --json -
      r9700ctl known-issues --markdown > known-issues.md

    \b
    Exit codes: 0 listed (also when no issue matches the filters); 64 bad input (a --rocm
    release that the manifest does not list is bad input).
    """
    from r9700ctl import known_issues as ki
    from r9700ctl import manifest

    data = manifest.load()
    if markdown:
        if gpu or rocm or json_path:
            raise BadInput(
                what="--markdown prints the whole list and takes no --gpu, --rocm or --json",
                hint="drop the filters, or drop --markdown",
            )
        click.echo(ki.render_markdown(data), nl=False)
        return
    check_json_path(json_path)
    pci_ids = gfx = None
    label = ""
    if gpu is not None:
        pci_ids, gfx, label = ki.gpu_filter(gpu, data)
    version = ki.check_version(rocm, data.release_names()) if rocm is not None else None
    selected = ki.select(ki.issues(data), pci_ids, gfx, version)
    write_json_output(json_path, ki.to_document(selected, {"gpu": gpu, "rocm": version}))
    if json_path == "-":
        return
    _render(app, selected, label, version, verbose)


def _render(
    app: Application, selected: list[KnownIssue], label: str, rocm: str | None, verbose: bool
) -> None:
    console = app.console()
    scope = " and ".join(s for s in (label, f"ROCm {rocm}" if rocm else "") if s)
    if not selected:
        console.print(f"no known issue for {scope}", markup=False)
        return
    for issue in selected:
        for line in _full(issue) if verbose else _short(issue):
            console.print(line, markup=False, highlight=False)
    tail = f" for {scope}" if scope else ""
    more = "" if verbose else "; --verbose adds effect, detection and sources"
    console.print(f"{len(selected)} known issue(s){tail}{more}", markup=False)


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
