"""The `stepc mcp` command (registered by stepc.cli): the MCP server for agents."""

from __future__ import annotations

import os
import sys

import click

from stepc.cli.common import EXIT_USAGE
from stepc.mcp.limits import MEMORY_LIMIT_MIB, TIME_LIMIT


@click.command("mcp", short_help="Serve stepc's tools to agents over MCP (stdio).")
@click.option("--workspace", default=".", show_default=True, metavar="DIR",
              help="The directory whose files the tools may read (programs, traces, "
              "hardware configs); paths outside it are refused.")
@click.option("--time-limit", type=click.FloatRange(min=0.1), default=TIME_LIMIT,
              show_default=True, metavar="SECONDS",
              help="Wall-time limit of each tool call (a call may ask for less).")
@click.option("--memory-limit", type=click.IntRange(min=0), default=MEMORY_LIMIT_MIB,
              show_default=True, metavar="MiB",
              help="Address-space limit of the worker process that runs the tools (0: none).")
def mcp_cmd(workspace: str, time_limit: float, memory_limit: int) -> None:
    """Run a Model Context Protocol server on standard input and output: tools to check,
    analyze, simulate, format, tune and estimate .step programs, explain diagnostic codes
    and look up operators; the language and operator references and the bundled programs
    as resources. Needs the `mcp` extra: pip install 'stepc[mcp]'. docs/agents.md says
    how to connect a client.
    """
    from importlib.metadata import PackageNotFoundError, version
    try:
        found = version("mcp")
    except PackageNotFoundError:
        found = None
    if found is None or not found.split(".")[0].isdigit() or int(found.split(".")[0]) < 2:
        have = f" (found mcp {found})" if found else ""
        click.echo(f"stepc mcp needs the MCP SDK 2 or later{have}: pip install 'stepc[mcp]'",
                   err=True)
        sys.exit(EXIT_USAGE)
    if not os.path.isdir(workspace):
        raise click.UsageError(f"--workspace {workspace}: not a directory")
    from stepc.mcp.server import serve
    serve(workspace, time_limit, memory_limit or None)
