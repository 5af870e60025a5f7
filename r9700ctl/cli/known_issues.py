"""`r9700ctl known-issues`: what R9700 owners found out, with sources, detection and workarounds."""

from __future__ import annotations

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.output import Output, json_option
from r9700ctl.errors import BadInput


@click.command("known-issues")
@click.option(
    "--gpu",
    metavar="ID",
    help="Only issues of this GPU: a PCI id (1002:7551), a gfx target (gfx1201) or part of a model "
    "name (R9700).",
)
@click.option("--rocm", metavar="VERSION", help="Only issues seen on this ROCm release (7.2.3, 7.1).")
@json_option("the list", schemas.KNOWN_ISSUES, replaces_text=True)
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
    from r9700ctl.report import known_issues as text

    data = manifest.load()
    if markdown and (gpu or rocm or json_path):
        raise BadInput(
            what="--markdown prints the whole list and takes no --gpu, --rocm or --json",
            hint="drop the filters, or drop --markdown",
        )
    out = Output(app, json_path, replaces_text=True)
    if markdown:
        out.echo(text.render_markdown(data), nl=False)
        out.finish(None)
    found = ki.listing(data, gpu=gpu, rocm=rocm)
    out.lines(text.issue_lines(found.issues, found.gpu_label, found.rocm, verbose))
    out.finish(found.to_dict())
