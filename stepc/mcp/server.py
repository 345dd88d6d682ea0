"""`stepc mcp`: the Model Context Protocol server over standard input and output.

Program tools and the task checker run in the worker process (time and memory limits, a
cache of checked programs); reference tools (`explain`, `operator`, `task_list`,
`task_show`) and resources answer in the server.
Every failure reaches the client as a tool error (`isError`), never as a dead server, and
nothing but protocol messages is written to standard output."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from stepc.mcp.limits import MEMORY_LIMIT_MIB, TIME_LIMIT
from stepc.mcp.schemas import TOOLS
from stepc.mcp.tasks import task_list, task_show
from stepc.mcp.worker import WORKER_TOOLS, ToolFailure, Worker
from stepc.mcp.workspace import Refused, Workspace

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.server.lowlevel import Server

# The MCP SDK and stepc's API load in `build`, after `serve` has started the worker: the
# worker loads the front end (about a second) while the server loads the SDK (as long).

INSTRUCTIONS = (
    "stepc checks, analyzes, simulates and tunes STeP (.step) programs. Pass a program as "
    "`program` text or a `path` under the workspace. Start with `check` (diagnostics carry "
    "codes; `explain` documents a code, `operator` an operator), then `estimate` or "
    "`simulate`. `task_list`, `task_show` and `task_check` are kernel-writing tasks with a "
    "checker and a reward. The language reference is the resource stepc://docs/language.")
RESOURCES = {  # uri -> (name, description, reader)
    "stepc://docs/language": ("language", "The .step language reference (docs/language.md)",
                              lambda: _reference().document("language")),
    "stepc://docs/operators": ("operators", "The operator and function reference, "
                               "generated from the operator registry",
                               lambda: _reference().generated("language", "operators")),
    "stepc://docs/diagnostics": ("diagnostics", "Every diagnostic code with a mistake and "
                                 "its fix (docs/diagnostics.md)",
                                 lambda: _reference().document("diagnostics")),
}


def _reference():
    """stepc.api.reference, loaded when first needed (see `build`)."""
    from stepc.api import reference
    return reference


def _explain(args: dict) -> dict:
    if not isinstance(args.get("code"), str):
        raise Refused("code: expected a diagnostic code such as E0343")
    return _reference().diagnostic(args["code"])


def _operator(args: dict) -> dict:
    reference = _reference()
    if args.get("name") is None:
        return {"operators": [{"name": n, "signature": reference.operator(n)["signature"]}
                              for n in reference.operator_names()]}
    if not isinstance(args["name"], str):
        raise Refused("name: expected an operator name such as Reshape")
    return reference.operator(args["name"])


# the tools answered in the server from the registries and the package's data (the rest
# run in the worker)
SERVER_TOOLS = {"explain": _explain, "operator": _operator, "task_list": task_list,
                "task_show": task_show}


def _check_arguments(name: str, args: dict) -> None:
    """Refuse arguments that do not fit the tool's input schema, naming the first misfit."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match
    error = best_match(Draft202012Validator(TOOLS[name]["input"]).iter_errors(args))
    if error is not None:
        where = "".join(f"[{p!r}]" for p in error.absolute_path)
        raise Refused(f"{name}: argument{where or 's'}: {error.message}")


def _error(message: str) -> types.CallToolResult:
    import mcp_types as types
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)],
                                is_error=True)


def _program_resources() -> dict[str, tuple]:
    """The bundled programs as resources; when this copy of stepc lacks them, none, and
    the log says so."""
    from stepc.api.errors import InputError
    try:
        found = _reference().programs()
    except InputError as e:
        logging.getLogger("stepc.mcp").warning("no program resources: %s", e)
        return {}
    return {f"stepc://programs/{name}": (name, f"The bundled program programs/{name}",
                                         path.read_text)
            for name, path in found.items()}


def build(workspace: Workspace, time_limit: float = TIME_LIMIT,
          memory_mib: int | None = MEMORY_LIMIT_MIB,
          worker: Worker | None = None) -> tuple[Server, Worker]:
    """The server and its worker (`worker`, when given, already started)."""
    import anyio
    import jsonschema  # noqa: F401 - loaded here, not by the first call's argument check
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    from stepc import __version__
    from stepc.api.errors import InputError

    worker = worker or Worker(str(workspace.root), memory_mib)
    resources = {**RESOURCES, **_program_resources()}

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=name, description=t["description"], input_schema=t["input"],
                       output_schema=t["output"]) for name, t in TOOLS.items()])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        try:
            if name not in TOOLS:
                raise Refused(f"no tool named {name!r}; the tools are {', '.join(TOOLS)}")
            _check_arguments(name, args)
            if name in WORKER_TOOLS:
                seconds = _time_limit(args.pop("time_limit", None), time_limit)
                ticket = object()
                try:
                    result = await anyio.to_thread.run_sync(
                        worker.call, name, args, seconds, ticket, abandon_on_cancel=True)
                except anyio.get_cancelled_exc_class():  # the client cancelled the request
                    worker.cancel(ticket)
                    raise
            else:
                result = SERVER_TOOLS[name](args)
        except (Refused, ToolFailure, InputError) as e:
            return _error(str(e))
        except Exception as e:  # noqa: BLE001 - the server keeps answering
            return _error(f"internal error in stepc ({type(e).__name__}: {e})")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, indent=1))],
            structured_content=result)

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=uri, name=name, description=text,
                           mime_type="text/markdown" if uri.startswith("stepc://docs")
                           else "text/plain")
            for uri, (name, text, _) in resources.items()])

    async def read_resource(ctx, params: types.ReadResourceRequestParams):
        uri = str(params.uri)
        if uri not in resources:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no resource {uri}")
        try:
            text = resources[uri][2]()
        except (InputError, OSError) as e:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(e)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, text=text, mime_type="text/markdown" if uri.startswith("stepc://docs")
            else "text/plain")])

    server = Server("stepc", version=__version__, instructions=INSTRUCTIONS,
                    on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=list_resources, on_read_resource=read_resource)
    return server, worker


def _time_limit(asked: Any, most: float) -> float:
    if asked is None:
        return most
    if isinstance(asked, bool) or not isinstance(asked, (int, float)) or not asked > 0:
        raise Refused(f"time_limit: expected a number of seconds > 0, found {asked!r}")
    return min(float(asked), most)


def serve(root: str, time_limit: float = TIME_LIMIT,
          memory_mib: int | None = MEMORY_LIMIT_MIB) -> None:
    """Serve MCP on standard input and output until the client closes them."""
    workspace = Workspace(root)
    worker = Worker(str(workspace.root), memory_mib)
    worker.start()  # first: it loads the front end while the server loads the SDK
    try:
        import anyio
        from mcp.server.stdio import stdio_server
        server, _ = build(workspace, time_limit, memory_mib, worker)

        async def main() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(main)
    finally:
        worker.stop()
