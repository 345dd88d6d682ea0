"""The `stepc` command group and its entry point.

Exit codes: 0 success (warnings allowed), 1 the program has errors, 2 usage error,
3 the simulation deadlocked, 70 internal error (a bug in stepc: please report it), 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NamedTuple

import click

from stepc import __version__
from stepc.cli import exits
from stepc.cli.exits import EXIT_INTERNAL, EXIT_INTERRUPTED


class _Entry(NamedTuple):
    """Where a command lives, and what `stepc --help` lists for it without importing it: the
    `short_help` the command declares or, for a command that declares none (`from_help`),
    the first sentence of its help, which click shortens to the terminal's width."""

    module: str
    attr: str
    summary: str
    from_help: bool = False

    def stand_in(self, name: str) -> click.Command:
        """A command that the group's help lists exactly as it lists the real one."""
        if self.from_help:
            return click.Command(name, help=self.summary)
        return click.Command(name, short_help=self.summary)


# Each command lives in the module of its family, imported only when the command line names
# it: `stepc check` does not load the simulator's or the sweeps' modules, and `stepc --help`
# loads none (tests/test_startup_imports.py checks the summaries against the commands).
_ELSEWHERE = {
    "check": _Entry("stepc.cli.program", "check_cmd", "Type- and shape-check a program."),
    "analyze": _Entry("stepc.cli.program", "analyze_cmd",
                      "Traffic, on-chip memory, FLOPs and intensity."),
    "dot": _Entry("stepc.cli.program", "dot_cmd", "Draw a program's graph (DOT, SVG, PNG, PDF)."),
    "sim": _Entry("stepc.cli.sim", "sim_cmd", "Simulate a program cycle by cycle."),
    "sweep": _Entry("stepc.cli.sweep", "sweep_cmd",
                    "Run every combination of params x hardware x traces of .step programs, "
                    "in parallel, and compare the points.", from_help=True),
    "plot": _Entry("stepc.cli.figures", "plot_cmd", "Plot sweep results: Pareto scatter plots "
                   "(default) or bar charts.", from_help=True),
    "reproduce": _Entry("stepc.cli.figures", "reproduce_cmd",
                        "Reproduce a figure of the paper's evaluation: run its points, put "
                        "stepc's numbers beside the paper's claims in DIR/fig<N>/report.md.",
                        from_help=True),
    "tune": _Entry("stepc.cli.tune", "tune_cmd",
                   "The best schedule under budgets, without the whole grid."),
    "fifo": _Entry("stepc.cli.fifo", "fifo_cmd",
                   "FIFO depths: deadlock minima and throughput depths."),
    "fmt": _Entry("stepc.cli.editor", "fmt_cmd", "Format .step files in canonical layout."),
    "lsp": _Entry("stepc.cli.editor", "lsp_cmd", "Run the language server (for editors)."),
    "from-torch": _Entry("stepc.cli.torch", "from_torch_cmd",
                         "Lower a PyTorch module to a .step program."),
    "import": _Entry("stepc.cli.interop", "import_cmd",
                     "Read a STeP IR graph (.pb) as a .step program."),
    "export": _Entry("stepc.cli.interop", "export_cmd",
                     "Write a .step program as a STeP IR graph (.pb)."),
    "mcp": _Entry("stepc.cli.mcp", "mcp_cmd", "Serve stepc's tools to agents over MCP (stdio)."),
    "tasks": _Entry("stepc.cli.tasks", "tasks_cmd",
                    "Kernel-writing tasks with checkers and rewards."),
    "rewrite": _Entry("stepc.cli.rewrite", "rewrite_cmd",
                      "Rewrite a program (downtile: hierarchical tiling)."),
}


class _Commands(dict):
    """A group's commands by name; those of `_ELSEWHERE` are imported on first lookup."""

    def __missing__(self, name: str) -> click.Command:
        if name not in _ELSEWHERE:
            raise KeyError(name)
        entry = _ELSEWHERE[name]
        command = self[name] = getattr(importlib.import_module(entry.module), entry.attr)
        return command

    def get(self, name, default=None):
        try:
            return self[name]
        except KeyError:
            return default


class _Group(click.Group):
    """The `stepc` group: commands of other modules load when used."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_ELSEWHERE})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands section of the help, from `_ELSEWHERE`'s summaries: no command's
        module is imported to list it."""
        listed = {**{name: entry.stand_in(name) for name, entry in _ELSEWHERE.items()},
                  **dict(self.commands)}  # the commands loaded or defined here as they are
        click.Group(commands=listed).format_commands(ctx, formatter)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse the group's own options; Ctrl-C while parsing ends as in a command (click
        would print "Aborted!" and exit 1)."""
        try:
            return super().parse_args(ctx, args)
        except KeyboardInterrupt:
            raise _Interrupted() from None

    def invoke(self, ctx: click.Context):
        """Run the command; Ctrl-C ends every command the same way: one line, exit 130
        (click would print an empty line and "Aborted!" and exit 1, the code for program
        errors). Commands that keep partial results catch it first and say where."""
        try:
            from stepc.spelling import command_line  # not needed to parse or print help

            with command_line():  # messages name arguments as flags (--hw, --trace)
                return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted() from None


class _Interrupted(click.ClickException):
    """A command stopped by Ctrl-C."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self) -> None:
        super().__init__("interrupted")

    def show(self, file=None) -> None:
        click.echo("stepc: interrupted (Ctrl-C): nothing more was done", err=True)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Exit codes: 0 ok, 1 program errors, 2 usage errors, 3 simulation "
             "deadlock, 70 internal error, 130 interrupted (Ctrl-C).")
@click.version_option(__version__, prog_name="stepc")
@click.option("--debug", is_flag=True, hidden=True, help="Show Python tracebacks of "
              "internal errors.")
def main(debug: bool) -> None:
    """stepc: check, analyze, simulate and draw Streaming Tensor Programs (.step files).

    \b
    Examples:
      stepc check --types programs/moe_simple.step
      stepc analyze programs/moe_static.step --trace routing=ids.npy
      stepc sim programs/swiglu.step --hw hdl-validation
      stepc dot programs/moe_static.step --collapse -o moe.svg

    `stepc COMMAND --help` describes each command.
    """


def run() -> None:
    """Entry point wrapper: never show a Python traceback for a stepc bug without context."""
    try:
        main(standalone_mode=True)
    except SystemExit as e:
        if exits.quick_exit_requested:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                click.echo(e.code, err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        raise
    except KeyboardInterrupt:  # before or after a command ran (while importing, exiting)
        click.echo("stepc: interrupted (Ctrl-C)", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:  # noqa: BLE001 - the last resort: exit 70 with a message
        click.echo(internal_error_message(e, debug="--debug" in sys.argv), err=True)
        if "--debug" in sys.argv:
            import traceback

            traceback.print_exc()
        sys.exit(EXIT_INTERNAL)


def internal_error_message(e: BaseException, debug: bool) -> str:
    """What exit 70 prints: the exception in one line, and how to get its traceback."""
    how = "the traceback is below" if debug else \
        "`stepc --debug COMMAND ...` prints the traceback to attach"
    return (f"stepc: internal error: {type(e).__name__}: {e}\n"
            f"this is a bug in stepc: please report it with the input that triggered it "
            f"({how})")
