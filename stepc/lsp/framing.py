"""Reading the editor's messages (JSON-RPC with `Content-Length` headers) off standard
input, whatever the bytes are.

pygls's own reader stops at the first message it cannot frame. Here every body is handed
to stepc.lsp.messages, which answers or drops what it cannot read, and the reader always
finds the next header again:

- a Content-Length above MAX_MESSAGE is refused without reading the body into memory; the
  bytes up to the next header line are skipped;
- a body cut short (a header line shows up inside it, or a whole JSON value arrived and
  nothing more comes for BODY_WAIT seconds) ends there, and the header after it is read;
- Content-Length 0 is an empty body, not the end of input;
- a header line is kept to MAX_LINE bytes however long the garbage before it runs.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading

from lsprotocol import types as lsp
from pygls.io_ import StdoutWriter

from stepc.lsp.messages import MAX_DIGITS, LongNumber, decode, handle_body, refuse_too_large

MAX_MESSAGE = 64 * 2**20  # bytes: a message with a larger Content-Length is refused unread
MAX_LINE = 65536  # bytes of a header line kept while its end has not arrived
BODY_WAIT = 1.0  # seconds to wait for the rest of a body that already holds a whole message
_HEADER = re.compile(rb"content-length[ \t]*:[ \t]*(\d+)", re.IGNORECASE)
# A whole Content-Length line: never inside a JSON body (a newline in a string is escaped).
_HEADER_LINE = re.compile(rb"content-length[ \t]*:[ \t]*\d+[ \t]*\r?\n", re.IGNORECASE)
_HEADER_OPEN = re.compile(rb"content-length[ \t]*(?::[ \t]*\d*[ \t]*\r?)?", re.IGNORECASE)
_LOOKAHEAD = 256  # bytes past a body searched for a header line that began inside it


class MessageReader:
    """Standard input read in whatever pieces arrive, with the bytes after a message that
    claimed too many kept for the next one."""

    def __init__(self, stdin, executor):
        self.stdin, self.executor = stdin, executor
        self.buffer = bytearray()  # grown in place: a long body arrives in linear time
        self.ended = False
        self.inflight: asyncio.Future | None = None  # a read that outlived a wait

    async def _take(self, timeout: float | None = None) -> bool:
        """Append what arrives next; False at the end of input or after `timeout`."""
        if self.ended:
            return False
        if self.inflight is None:
            loop = asyncio.get_running_loop()
            self.inflight = loop.run_in_executor(self.executor, self.stdin.read1, 65536)
        done, _ = await asyncio.wait({self.inflight}, timeout=timeout)
        if not done:
            return False
        chunk = self.inflight.result()
        self.inflight = None
        self.buffer += chunk
        self.ended = not chunk
        return bool(chunk)

    def _cut(self, n: int) -> bytes:
        taken = bytes(self.buffer[:n])
        del self.buffer[:n]
        return taken

    async def readline(self) -> bytes | None:
        """The next line (None at the end of input). Of a line longer than MAX_LINE only
        the end is kept, where a header may begin."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE:
                del self.buffer[:-_LOOKAHEAD]
            if not await self._take():
                return self._cut(len(self.buffer)) or None
        return self._cut(self.buffer.index(b"\n") + 1)

    async def read_body(self, n: int) -> bytes:
        """The body of a message of `n` bytes, or what came of it when it is cut short: by
        a header line inside it, by the end of input, or by BODY_WAIT seconds of quiet
        after a whole JSON value (a Content-Length larger than the message)."""
        scanned = 0
        while True:
            found = _HEADER_LINE.search(self.buffer, max(scanned - _LOOKAHEAD, 0),
                                        n + _LOOKAHEAD)
            if found and found.start() < n:
                return self._cut(found.start())
            scanned = len(self.buffer)
            if scanned >= n:
                if not _header_opens(self.buffer, n):
                    return self._cut(n)
                wait = BODY_WAIT  # the body may be a header cut off: see whether it goes on
            else:
                wait = BODY_WAIT if _whole_json(self.buffer) else None
            if not await self._take(wait):
                return self._cut(n)

    def body_start(self) -> bytes:
        """The first bytes of the body already read (up to a header line that follows)."""
        start = bytes(self.buffer[:MAX_LINE])
        found = _HEADER_LINE.search(start)
        return start[:found.start()] if found else start

    async def skip_to_header(self) -> None:
        """Drop the bytes up to the next header line (the body of a refused message),
        holding no more than a header line of them."""
        while True:
            found = _HEADER_LINE.search(self.buffer)
            if found:
                del self.buffer[:found.start()]
                return
            del self.buffer[:-_LOOKAHEAD]
            if not await self._take():
                return

    def unread(self, data: bytes) -> None:
        self.buffer[:0] = data


def _header_opens(data: bytes, before: int) -> bool:
    """Whether `data` ends with the beginning of a header line that starts before
    byte `before`."""
    for i in range(max(len(data) - _LOOKAHEAD, 0), min(before, len(data))):
        rest = data[i:].lower()
        if b"content-length".startswith(rest) or _HEADER_OPEN.fullmatch(data, i):
            return True
    return False


def _whole_json(data: bytes) -> bool:
    """Whether `data` is a JSON object or array (and nothing more), cheaply."""
    if data[-_LOOKAHEAD:].rstrip()[-1:] not in (b"}", b"]"):
        return False
    _, problem, rest = decode(data)
    return problem is None and not rest.strip()


async def read_length(reader: MessageReader) -> int | LongNumber | None:
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
            digits = match.group(1).decode("ascii")
            length = int(digits) if len(digits) <= MAX_DIGITS else LongNumber(digits)


async def serve_messages(server, reader: MessageReader) -> None:
    while not server._stop_event.is_set():
        length = await read_length(reader)
        if length is None:
            return
        if isinstance(length, LongNumber) or length > MAX_MESSAGE:
            refuse_too_large(server, reader.body_start(), length, MAX_MESSAGE)
            await reader.skip_to_header()
            continue
        body = await reader.read_body(length)
        try:
            rest = handle_body(server, body, length)
        except Exception as e:  # a bug in stepc or pygls: the editor's session goes on
            server.log(f"internal error on a message: {type(e).__name__}: {e}",
                       lsp.MessageType.Error)
            continue
        if rest:  # the Content-Length ran into the next message: read it next
            reader.unread(rest)


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
