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
    """stepc.app.reference, loaded when first needed (see `build`)."""
    from stepc.app import reference
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
    from stepc.app import InputError
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
    from stepc.app import InputError

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


async def forward_wellformed(read, send, write) -> None:
    """Pass the messages of `read` that are JSON-RPC on to `send`; a line that is not gets
    the error response the JSON-RPC spec gives it on `write` (the SDK only logs it, so a
    client waited for an answer forever). `send` closes when `read` ends."""
    async with send:
        async for item in read:
            if not isinstance(item, Exception):
                await send.send(item)
                continue
            answer = malformed_answer(item)
            if answer is not None:
                await write.send(answer)


def malformed_answer(error: Exception):
    """The JSON-RPC error response for a line the SDK could not read: -32700 for text that
    is not JSON, -32600 for JSON that is no request, with the request's id when one can be
    read (a lone UTF-16 surrogate in an argument is valid to Python's JSON reader, not to
    the SDK's); None for a malformed response from the client (only logged)."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    log = logging.getLogger("stepc.mcp")
    line = _raw_line(error)
    try:
        doc = json.loads(line) if line is not None else None
    except (ValueError, RecursionError):
        log.warning("a line that is not JSON: answered with a parse error")
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(
            code=types.PARSE_ERROR, message="parse error: the line is not JSON")))
    if isinstance(doc, dict) and ("result" in doc or "error" in doc) and "method" not in doc:
        log.warning("a malformed response from the client: dropped")
        return None
    rid = doc.get("id") if isinstance(doc, dict) else None
    if isinstance(rid, bool) or not isinstance(rid, (int, str)) or \
            isinstance(rid, int) and abs(rid) >= 2**53:
        rid = None
    elif isinstance(rid, str):
        rid = rid.encode("utf-8", "backslashreplace").decode("utf-8")
    why = "not a JSON-RPC request or notification"
    if line is not None and _has_lone_surrogate(doc):
        why = "a string holds a lone UTF-16 surrogate, which is not text"
    log.warning("an invalid request: %s", why)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(
        code=types.INVALID_REQUEST, message=f"invalid request: {why}")))


def _raw_line(error: Exception) -> str | None:
    """The text the SDK failed to read, from its validation error: the line itself when
    it is no JSON, else the whole message (an error about one field holds only the
    field's value, so the message is taken from an error about the whole)."""
    errors = getattr(error, "errors", None)
    try:
        found = errors() if callable(errors) else []
    except Exception:  # noqa: BLE001 - any other exception: no line to read
        return None
    whole = [e["input"] for e in found if isinstance(e.get("input"), (str, bytes))
             or isinstance(e.get("input"), dict) and "jsonrpc" in e["input"]
             or len(e.get("loc", ())) <= 1]
    if not whole:
        return None
    raw = whole[0]
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return raw if isinstance(raw, str) else json.dumps(raw)


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


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
                send, wellformed = anyio.create_memory_object_stream(0)
                async with anyio.create_task_group() as group:
                    group.start_soon(forward_wellformed, read, send, write)
                    await server.run(wellformed, write, server.create_initialization_options())
                    group.cancel_scope.cancel()

        anyio.run(main)
    finally:
        worker.stop()
