"""One framed message body, read as JSON-RPC 2.0 and handed to pygls, or answered or
dropped when it cannot be read.

As the JSON-RPC specification says: a body that is not JSON is a parse error (-32700), a
value that is not a request, notification or response is an invalid request (-32600),
both answered to the message's id when it can be read and to id null when it cannot; a
request whose parameters do not fit the protocol gets -32602. A notification or a
response that cannot be read has nobody to answer: it is dropped with a line in the
editor's log of the server. Numbers of more than MAX_DIGITS digits and nesting deeper
than Python's recursion limit are read as unreadable values, not errors of the server.
"""

from __future__ import annotations

import json
import re

from lsprotocol import types as lsp
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
)

MAX_DIGITS = 100  # digits of a JSON integer read as a number; longer ones are unreadable
_ID = re.compile(rb'(?<!\\)"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')


class LongNumber:
    """A JSON integer of more than MAX_DIGITS digits: no id, no position, no setting."""

    def __init__(self, digits: str):
        self.digits = len(digits.lstrip("-"))

    def __str__(self) -> str:
        return f"<a number of {self.digits} digits>"


def _integer(text: str):
    return int(text) if len(text.lstrip("-")) <= MAX_DIGITS else LongNumber(text)


_DECODER = json.JSONDecoder(parse_int=_integer)


def decode(body: bytes) -> tuple[object, str | None, bytes]:
    """The JSON value at the start of `body`, or why there is none; and the bytes after
    it."""
    text = body.decode("utf-8", "replace").lstrip()
    if not text:
        return None, "the body is empty", b""
    try:
        value, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError as e:
        return None, f"not JSON ({e.msg} at character {e.pos})", b""
    except RecursionError:
        return None, "JSON nested too deeply", b""
    return value, None, text[end:].encode("utf-8")


def valid_id(value) -> bool:
    """Whether `value` can be a request's id (LSP: an integer or a string)."""
    return isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool)


def visible_id(data: bytes):
    """The id a body that cannot be decoded shows (None when it shows none)."""
    found = _ID.search(data)
    if found is None:
        return None
    value, problem, _ = decode(found.group(1))
    return value if problem is None and valid_id(value) else None


def reply_error(server, msg_id, error: type[JsonRpcException], message: str) -> None:
    """A JSON-RPC error response (to id null when `msg_id` is None)."""
    server.protocol._send_data({"jsonrpc": "2.0", "id": msg_id,
                                "error": {"code": error.CODE, "message": message}})


def drop(server, message: str) -> None:
    """A message nobody waits an answer for, left unhandled: say so in the editor's log."""
    server.log(f"dropped a message: {message}", lsp.MessageType.Warning)


def refuse_too_large(server, start: bytes, length, limit: int) -> None:
    """Answer a message whose Content-Length is above `limit` (to the id its first bytes
    show, else to id null)."""
    reply_error(server, visible_id(start), JsonRpcInvalidRequest,
                f"Content-Length {length} is more than the {limit // 2**20} MiB the server "
                f"reads: the message is skipped")


def handle_body(server, body: bytes, length: int) -> bytes:
    """Hand one message to pygls, or answer or drop it saying why; the bytes after its
    JSON value (the next message, when the Content-Length ran into it)."""
    value, problem, rest = decode(body)
    if problem is not None:
        hint = "" if len(body) == length else \
            f" (the body ended after {len(body)} of its {length} bytes)"
        reply_error(server, visible_id(body), JsonRpcParseError,
                    f"the message is {problem}{hint}; is its Content-Length right?")
        return b""
    if not rest.strip():
        rest = b""
    if not isinstance(value, dict):
        reply_error(server, None, JsonRpcInvalidRequest,
                    f"a message must be a JSON object, not {_show(value)}")
        return rest
    _dispatch(server, value)
    return rest


def _dispatch(server, value: dict) -> None:
    has_id, method = "id" in value, value.get("method")
    msg_id = value.get("id") if valid_id(value.get("id")) else None
    if "method" not in value:
        if "result" in value or "error" in value:  # a response to a request of ours
            if msg_id is None or value.get("jsonrpc") != "2.0":
                drop(server, f"a response with id {_show(value.get('id'))}")
                return
            if msg_id not in server.protocol._result_types:  # e.g. the id of a request
                drop(server, f"a response with id {_show(msg_id)}, which names no "
                             f"request of the server's")
                return
        elif has_id:
            reply_error(server, msg_id, JsonRpcInvalidRequest,
                        "a message with an id needs a method (a request) or a result or "
                        "error (a response)")
            return
        else:
            reply_error(server, None, JsonRpcInvalidRequest,
                        "a message needs a method, or an id and a result or error")
            return
    elif not has_id:  # a notification
        if not isinstance(method, str):
            drop(server, f"a notification whose method is {_show(method)}")
            return
        if value.get("jsonrpc") != "2.0":
            drop(server, f'{method}: a notification without "jsonrpc": "2.0"')
            return
        params = value.get("params")
        if method == lsp.CANCEL_REQUEST and not (isinstance(params, dict)
                                                 and valid_id(params.get("id"))):
            drop(server, f"{method}: no id of a request in {_show(params)}")
            return
    else:
        problem = _request_problem(value, msg_id, method)
        if problem is not None:
            reply_error(server, msg_id, JsonRpcInvalidRequest, problem)
            return
        if server.protocol._shutdown and method != lsp.EXIT:
            reply_error(server, msg_id, JsonRpcInvalidRequest,
                        f"{method}: the server is shutting down")
            return
    try:
        message = server.protocol.structure_message(value)
    except (JsonRpcException, RecursionError, TypeError, ValueError) as e:
        if has_id and "method" in value:
            invalid = isinstance(e, JsonRpcInvalidParams)
            reply_error(server, msg_id, JsonRpcInvalidParams if invalid else
                        JsonRpcInvalidRequest,
                        f"{method}: " + ("the parameters do not fit the protocol "
                                         "(a negative or too large position?)"
                                         if invalid else "cannot read the request"))
        else:
            drop(server, f"{_show(method or value.get('id'))}: it does not fit the protocol")
        return
    server.protocol.handle_message(message)


def _request_problem(value: dict, msg_id, method) -> str | None:
    """Why a message with an id and a method is not a request (None when it is)."""
    if msg_id is None:
        return f"the id is {_show(value['id'])}, not an integer or a string"
    if not isinstance(method, str):
        return f"the method is {_show(method)}, not a string"
    if value.get("jsonrpc") != "2.0":
        return f'{method}: a request needs "jsonrpc": "2.0"'
    if not isinstance(value.get("params", {}), (dict, list)):
        return f"{method}: the parameters are {_show(value['params'])}, not an object or array"
    return None


def _show(value) -> str:
    """A value of a message, briefly, for an error message."""
    if isinstance(value, LongNumber):
        return str(value)
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
