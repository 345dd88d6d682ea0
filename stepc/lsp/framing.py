"""Reading the editor's messages (JSON-RPC with `Content-Length` headers) so that every
request gets an answer.

pygls drops a message it cannot read without a word: a request whose parameters do not
fit the protocol (a negative position) or a body cut short by a wrong Content-Length
never gets a reply, and the bytes after it are lost with it. Here a request that cannot
be read is answered with a JSON-RPC error saying why; a body shorter than its JSON is a
parse error answered to its id when it shows one; and after a wrong Content-Length the
reader finds the next header again, so the messages after it are answered.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading

from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcParseError,
)
from pygls.io_ import StdoutWriter

BODY_WAIT = 1.0  # seconds to wait for the rest of a body that already holds a whole message
_HEADER = re.compile(rb"content-length\s*:\s*(\d+)", re.IGNORECASE)
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_DECODER = json.JSONDecoder()


class MessageReader:
    """Standard input read in whatever pieces arrive, with the bytes after a message that
    claimed too many kept for the next one."""

    def __init__(self, stdin, executor):
        self.stdin, self.executor = stdin, executor
        self.buffer = b""
        self.inflight: asyncio.Future | None = None  # a read that outlived a wait

    def _more(self) -> asyncio.Future:
        if self.inflight is None:
            loop = asyncio.get_running_loop()
            self.inflight = loop.run_in_executor(self.executor, self.stdin.read1, 65536)
        return self.inflight

    async def _take(self, timeout: float | None = None) -> bool:
        """Append what arrives next; False at the end of input or after `timeout`."""
        future = self._more()
        done, _ = await asyncio.wait({future}, timeout=timeout)
        if not done:
            return False
        self.inflight = None
        chunk = future.result()
        self.buffer += chunk
        return bool(chunk)

    async def readline(self) -> bytes | None:
        """The next line (None at the end of input)."""
        while b"\n" not in self.buffer:
            if not await self._take():
                line, self.buffer = self.buffer, b""
                return line or None
        i = self.buffer.index(b"\n") + 1
        line, self.buffer = self.buffer[:i], self.buffer[i:]
        return line

    async def read(self, n: int) -> bytes:
        """`n` bytes, or fewer when a whole JSON value is there and nothing more comes
        for BODY_WAIT seconds (a Content-Length larger than the message)."""
        while len(self.buffer) < n:
            if not await self._take(BODY_WAIT if _whole_json(self.buffer) else None):
                break
        body, self.buffer = self.buffer[:n], self.buffer[n:]
        return body

    def unread(self, data: bytes) -> None:
        self.buffer = data + self.buffer


def _whole_json(data: bytes) -> bool:
    try:
        _DECODER.raw_decode(data.decode("utf-8").lstrip())
    except ValueError:
        return False
    return True


async def read_length(reader: MessageReader) -> int | None:
    """The Content-Length of the next message's headers (None at the end of input).
    Lines that are not headers (the tail of a body cut short) are skipped; a header glued
    to such a tail is still found."""
    length = None
    while True:
        line = await reader.readline()
        if line is None:
            return None
        if not line.strip():
            if length is not None:
                return length
            continue
        match = _HEADER.search(line)
        if match:
            length = int(match.group(1))


def reply_error(protocol, msg_id, error: type[JsonRpcException], message: str) -> None:
    protocol._send_response(msg_id, error=error(message).to_response_error())


def handle_body(protocol, body: bytes, reader: MessageReader) -> None:
    """Hand one message to pygls, or answer why it cannot be read."""
    text = body.decode("utf-8", "replace").lstrip()
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError as e:
        found = _ID.search(body)
        msg_id = json.loads(found.group(1)) if found else None
        reply_error(protocol, msg_id, JsonRpcParseError,
                    f"the message is not whole JSON ({e.msg} at byte {e.pos} of "
                    f"{len(body)}); is its Content-Length right?")
        return
    rest = text[end:]
    if rest.strip():  # the Content-Length ran into the next message: read it next
        reader.unread(rest.encode("utf-8"))
    request = isinstance(value, dict) and "id" in value and "method" in value
    try:
        message = json.loads(text[:end], object_hook=protocol.structure_message)
    except JsonRpcException as e:
        if request:
            invalid = isinstance(e, JsonRpcInvalidParams)
            reply_error(protocol, value["id"], type(e),
                        f"{value['method']}: " + ("the parameters do not fit the protocol "
                                                  "(a negative or too large position?)"
                                                  if invalid else "cannot read the request"))
        return
    protocol.handle_message(message)


async def serve_messages(server, reader: MessageReader) -> None:
    while not server._stop_event.is_set():
        length = await read_length(reader)
        if length is None:
            return
        body = await reader.read(length)
        if not body:
            return
        handle_body(server.protocol, body, reader)


def start_io(server) -> None:
    """Run `server` on standard input and output with this reader."""
    server._stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
    reader = MessageReader(sys.stdin.buffer, server.thread_pool)
    try:
        asyncio.run(serve_messages(server, reader))
    except (BrokenPipeError, KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
