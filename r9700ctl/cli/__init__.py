"""The r9700ctl command line. Subcommands are imported lazily so `--help` stays fast."""

from __future__ import annotations

import importlib
import os
import sys

import click

from r9700ctl import __version__
from r9700ctl.cli.app import Application
from r9700ctl.errors import EXIT_BAD_INPUT, EXIT_CANNOT_RUN, R9700Error

# command name -> "module:attribute"; each module holds one command (or group).
COMMANDS = {
    "provision": "r9700ctl.cli.provision:provision",
    "upgrade": "r9700ctl.cli.upgrade:upgrade",
    "rollback": "r9700ctl.cli.upgrade:rollback",
    "uninstall": "r9700ctl.cli.uninstall:uninstall",
    "kernel-upgrade": "r9700ctl.cli.upgrade:kernel_upgrade",
    "validate": "r9700ctl.cli.validate:validate",
    "history": "r9700ctl.cli.history:history",
    "monitoring": "r9700ctl.cli.monitoring:monitoring",
    "doctor": "r9700ctl.cli.doctor:doctor",
    "collect": "r9700ctl.cli.collect:collect",
    "verify": "r9700ctl.cli.verify:verify",
    "lab": "r9700ctl.cli.lab:lab",
    "known-issues": "r9700ctl.cli.known_issues:known_issues",
    "explain": "r9700ctl.cli.explain:explain",
}

EPILOG = """\b
Exit codes: 0 all good, 1 warnings only, 2 something failed,
3 could not run (unreachable host, missing prerequisite, timeout),
4 validate: inconclusive (nothing failed, but something could not be judged),
64 bad invocation or bad input (nothing was contacted), 130 interrupted (Ctrl-C).

\b
Shell completion (bash; use zsh_source / fish_source for those shells):
  eval "$(_R9700CTL_COMPLETE=bash_source r9700ctl)"
"""


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="r9700ctl")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Turn servers full of AMD Radeon AI PRO R9700 cards into working ROCm nodes,
    then prove that every card, link and node performs as it should.

    \b
    Typical day:
      r9700ctl doctor inventory.ini       can the tool reach and work on these hosts?
      r9700ctl provision inventory.ini    driver, ROCm, groups, environment, kernel flags
      r9700ctl upgrade inventory.ini      another ROCm release, in batches gated by validate
      r9700ctl verify inventory.ini       the testinfra suite against the nodes
      r9700ctl validate inventory.ini     GPU, link and node measurements with verdicts
      r9700ctl history                    the validate runs on record, trends per GPU
      r9700ctl lab up                     throwaway test nodes on this machine (root)
    """
    ctx.obj = Application()


def main() -> None:
    """Console-script entry point: one line per error, an exit code per the contract, no traceback."""
    try:
        rc = cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        rc = exc.exit_code
    except click.exceptions.Abort:
        # Click turns Ctrl-C inside a command (and EOF at a prompt) into Abort.
        click.echo("interrupted", err=True)
        rc = 130
    except click.exceptions.NoArgsIsHelpError as exc:
        # `r9700ctl` or `r9700ctl lab` alone asks what there is: the help, not an error.
        click.echo(exc.format_message())
        rc = 0
    except click.UsageError as exc:
        hint = ""
        if exc.ctx is not None:
            hint = f" (try '{exc.ctx.command_path} --help')"
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        rc = EXIT_BAD_INPUT
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        rc = EXIT_BAD_INPUT
    except R9700Error as exc:
        click.echo(f"error: {exc.one_line()}", err=True)
        rc = exc.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        rc = 130
    except Exception as exc:  # the last line of defence: never a traceback for the user
        if os.environ.get("R9700CTL_DEBUG"):
            raise
        click.echo(
            f"error: internal error: {type(exc).__name__}: {exc} (rerun with R9700CTL_DEBUG=1 for details)",
            err=True,
        )
        rc = EXIT_CANNOT_RUN
    sys.exit(rc if isinstance(rc, int) else 0)
