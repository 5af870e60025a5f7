"""`r9700ctl explain CODE`: the record of a reason code (r9700ctl/data/codes.yaml)."""

from __future__ import annotations

import click

from r9700ctl.cli.app import Application
from r9700ctl.cli.output import Output
from r9700ctl.errors import BadInput


@click.command()
@click.argument("code", required=False, metavar="[CODE]")
@click.option(
    "--markdown",
    is_flag=True,
    help="Print the whole catalogue as Markdown (docs/codes.md is this output); takes no CODE.",
)
@click.pass_obj
def explain(app: Application, code: str | None, markdown: bool) -> None:
    """Explain a reason code: what it means, the likely cause, the next step, what to do with the
    node (the action class) and the public source.

    \b
    Every verdict that is not PASS carries a code: validate's and doctor's tables and JSON
    (`code`), JUnit and Prometheus show it. Without CODE, every code is listed with its
    meaning. Nothing is contacted.

    \b
    Examples:
      r9700ctl explain PCIE_LINK_DOWNTRAINED
      r9700ctl explain
      r9700ctl explain --markdown > codes.md

    \b
    Exit codes: 0 explained (or listed); 64 a code the catalogue does not have (the line names
    the nearest ones).
    """
    from r9700ctl.agent import codes
    from r9700ctl.report import explain as text

    if markdown and code is not None:
        raise BadInput(what="--markdown prints the whole catalogue and takes no CODE", hint="drop CODE")
    out = Output(app, None)
    catalogue = codes.catalogue()
    if markdown:
        out.echo(text.render_markdown(catalogue), nl=False)
    elif code is None:
        out.lines(text.listing_lines(catalogue))
    else:
        entry = catalogue.get(code.strip().upper())
        if entry is None:
            near = codes.nearest(code)
            raise BadInput(
                what=f"unknown reason code {code!r}",
                hint=(f"nearest: {', '.join(near)}; " if near else "")
                + "`r9700ctl explain` lists every code",
            )
        out.lines(text.explain_lines(entry))
    out.finish(None)
