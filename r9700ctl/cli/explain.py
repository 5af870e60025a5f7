"""`r9700ctl explain CODE`: the record of a reason code (r9700ctl/data/codes.yaml)."""

from __future__ import annotations

import click

from r9700ctl.cli.app import Application
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
    from r9700ctl import codes

    if markdown:
        if code is not None:
            raise BadInput(what="--markdown prints the whole catalogue and takes no CODE", hint="drop CODE")
        click.echo(codes.render_markdown(), nl=False)
        return
    catalogue = codes.load()
    if code is None:
        width = max(len(name) for name in catalogue)
        for name in sorted(catalogue):
            click.echo(f"{name:<{width}}  {catalogue[name].meaning}")
        return
    entry = catalogue.get(code.strip().upper())
    if entry is None:
        near = codes.nearest(code)
        raise BadInput(
            what=f"unknown reason code {code!r}",
            hint=(f"nearest: {', '.join(near)}; " if near else "") + "`r9700ctl explain` lists every code",
        )
    for line in codes.explain_lines(entry):
        click.echo(line)
