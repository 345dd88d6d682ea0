"""Hostile .step programs for tests/test_hostile_programs.py: seeded mutations of the
bundled programs, and the commands every mutant goes through.

A mutation works on the lexer's tokens (stepc.grammar.lexer), on lines or on raw bytes:
tokens deleted, duplicated or swapped; a name replaced by another of the program's; a
number made small or huge (10**5000, 2**64); a line deleted, duplicated or moved; random
bytes inserted; a NUL byte, a lone surrogate or a cut UTF-8 sequence; CRLF or lone CR line
ends; a name 50,000 characters long; an expression nested past the limit. The same seed always
gives the same mutants, so a failure names a case that can be run again.
"""

from __future__ import annotations

import contextlib
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner, Result

from stepc.cli import main
from stepc.diagnostics import StepError
from stepc.grammar.lexer import Token, tokenize
from stepc.grammar.parse import parse
from stepc.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "stepc" / "programs"
HUGE_NUMBERS = ["1" + "0" * 5000, str(2**64), str(2**64 - 1), str(2**63), str(2**32), "0",
                "00", "1" + "0" * 31]
BAD_BYTES = [b"\x00", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xe2\x82", b"\xff", b"\xc0\xaf",
             b"\xef\xbb\xbf", b"\r", b"\x1b[2J", b"\xe2\x80\xae"]
LONG_NAME = 50_000  # characters of a name made long
ENCODING = "surrogateescape"  # how mutated text holds bytes that are not UTF-8


@dataclass(frozen=True)
class Mutant:
    """One hostile program: what it was made from, and its bytes."""

    name: str  # program, mutation and seed: enough to make it again
    data: bytes


def _tokens(text: str) -> list[Token]:
    return [t for t in tokenize(text) if t.kind != "comment"]


def _splice(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _raw(data: bytes) -> str:
    """Bytes as text that encodes back to them (`ENCODING`), valid UTF-8 or not."""
    return data.decode("utf-8", ENCODING)


def delete_token(rng: random.Random, text: str) -> str:
    t = rng.choice(_tokens(text))
    return _splice(text, t.offset, t.offset + len(t.text), "")


def duplicate_token(rng: random.Random, text: str) -> str:
    t = rng.choice(_tokens(text))
    return _splice(text, t.offset, t.offset, t.text + " ")


def swap_tokens(rng: random.Random, text: str) -> str:
    tokens = _tokens(text)
    i = rng.randrange(len(tokens) - 1)
    a, b = tokens[i], tokens[i + 1] if rng.random() < 0.5 else rng.choice(tokens[i + 1:])
    return (text[:a.offset] + b.text + text[a.offset + len(a.text):b.offset] + a.text
            + text[b.offset + len(b.text):])


def replace_name(rng: random.Random, text: str) -> str:
    """A name replaced by another of the program's: it parses, and fails (or not) later."""
    names = [t for t in _tokens(text) if t.kind == "name"]
    t = rng.choice(names)
    return _splice(text, t.offset, t.offset + len(t.text), rng.choice(names).text)


def small_number(rng: random.Random, text: str) -> str:
    """A number replaced by a small one (0, 1, a power of two, odd ones): shapes and tiles
    that no longer divide, loops of one iteration."""
    t = rng.choice([t for t in _tokens(text) if t.kind == "number"])
    new = rng.choice(["0", "1", "2", "3", "7", "16", "17", "64", "100", "256"])
    return _splice(text, t.offset, t.offset + len(t.text), new)


def lines(rng: random.Random, text: str) -> str:
    """A line deleted, duplicated or moved."""
    rows = text.split("\n")
    i = rng.randrange(len(rows))
    row = rows.pop(i)
    how = rng.choice(["delete", "duplicate", "move"])
    if how != "delete":
        rows.insert(i if how == "duplicate" else rng.randrange(len(rows) + 1), row)
    return "\n".join(rows)


def insert_bytes(rng: random.Random, text: str) -> str:
    at = rng.randrange(len(text) + 1)
    noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
    return text[:at] + _raw(noise) + text[at:]


def huge_number(rng: random.Random, text: str) -> str:
    numbers = [t for t in _tokens(text) if t.kind == "number"]
    t = rng.choice(numbers)
    return _splice(text, t.offset, t.offset + len(t.text), rng.choice(HUGE_NUMBERS))


def bad_bytes(rng: random.Random, text: str) -> str:
    at = rng.randrange(len(text) + 1)
    return text[:at] + _raw(rng.choice(BAD_BYTES)) + text[at:]


def line_ends(rng: random.Random, text: str) -> str:
    return text.replace("\n", rng.choice(["\r\n", "\r", "\n\r", "\u2028"]))


def long_name(rng: random.Random, text: str) -> str:
    """A name made LONG_NAME characters long: everywhere (the program still means the
    same) or at one use."""
    names = [t for t in _tokens(text) if t.kind == "name"]
    t = rng.choice(names)
    long = t.text * (LONG_NAME // len(t.text) + 1)
    if rng.random() < 0.5:
        return _splice(text, t.offset, t.offset + len(t.text), long)
    out, last = [], 0
    for u in names:
        if u.text == t.text:
            out += [text[last:u.offset], long]
            last = u.offset + len(u.text)
    return "".join(out) + text[last:]


def deep_nesting(rng: random.Random, text: str) -> str:
    """An operand nested past the limit: in brackets, indexed, negated or summed."""
    t = rng.choice([t for t in _tokens(text) if t.kind in ("name", "number")])
    depth = rng.choice([25, 60, 1000])
    new = rng.choice([f"{'(' * depth}{t.text}{')' * depth}", t.text + "[0]" * depth,
                      "-(" * depth + t.text + ")" * depth, t.text + " - 1" * depth,
                      t.text + " // 1" * depth])
    return _splice(text, t.offset, t.offset + len(t.text), new)


MUTATIONS: dict[str, Callable[[random.Random, str], str]] = {
    f.__name__: f for f in (delete_token, duplicate_token, swap_tokens, replace_name,
                            small_number, lines, insert_bytes, huge_number, bad_bytes,
                            line_ends, long_name, deep_nesting)}


def mutants(seed: int, count: int, programs: list[Path]) -> list[Mutant]:
    """`count` mutants of `programs`, each mutation taking its turn, from one seed."""
    rng = random.Random(seed)
    kinds = sorted(MUTATIONS)
    out = []
    for i in range(count):
        program = rng.choice(programs)
        kind = kinds[i % len(kinds)]
        text = program.read_text(encoding="utf-8")
        for _ in range(1 if rng.random() < 0.7 else rng.randrange(2, 5)):
            text = MUTATIONS[kind](rng, text)  # later rounds mutate what the earlier made
        out.append(Mutant(f"{program.stem}-{kind}-s{seed}-{i}",
                          text.encode("utf-8", ENCODING)))
    return out


# ------------------------------------------------------------------ running the commands
class Hang(BaseException):
    """A command that ran past its time limit (a BaseException: no `except Exception` in
    the command swallows it)."""


@contextlib.contextmanager
def time_limit(seconds: int):
    """Raise Hang in this (the main) thread after `seconds`."""
    def expire(signum, frame):
        raise Hang(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _parses(text: str) -> bool:
    try:
        parse(SourceFile("formatted.step", text))
    except StepError:
        return False
    return True


# command -> (its arguments, FILE standing for the program; what an exit-0 output must be)
COMMANDS: dict[str, tuple[list[str], Callable[[Result, Path], bool]]] = {
    "check": (["check", "FILE"], lambda r, _: "error[" not in r.output),
    "analyze": (["analyze", "FILE"], lambda r, _: "summary:" in r.stdout),
    "dot": (["dot", "FILE"], lambda r, _: "digraph" in r.stdout),
    "sim": (["sim", "FILE", "--timing-only", "--max-cycles", "2000"],
            lambda r, _: "cycles" in r.stdout),
    "fifo": (["fifo", "--static", "FILE"], lambda r, _: bool(r.stdout.strip())),
    "rewrite": (["rewrite", "downtile", "FILE", "--tile", "16x16", "-o", "OUT", "--force"],
                lambda r, out: _parses(out.read_text(encoding="utf-8"))),
}


def problems(command: str, path: Path, seconds: int) -> tuple[int | None, list[str]]:
    """The exit code of `stepc COMMAND` on the program at `path`, and what is wrong with
    it: an internal error (an exception, or a traceback printed), a hang past `seconds`,
    an exit code outside 0, 1 and 2, or exit 0 with output that is not what the command
    promises."""
    args, valid = COMMANDS[command]
    out = path.with_suffix(".out.step")
    args = [str(path) if a == "FILE" else str(out) if a == "OUT" else a for a in args]
    try:
        with time_limit(seconds):
            res = CliRunner().invoke(main, args)
    except Hang as e:
        return None, [f"{command}: hang: {e}"]
    found = []
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        found.append(f"{command}: internal error: {res.exception!r}")
    if "Traceback" in res.output or "internal error" in res.output:
        found.append(f"{command}: a traceback or internal error printed")
    if res.exit_code not in (0, 1, 2):
        found.append(f"{command}: exit {res.exit_code}")
    elif res.exit_code == 0 and not valid(res, out):
        found.append(f"{command}: exit 0 but not what it promises: {res.output[-300:]!r}")
    return res.exit_code, found


def fmt_problems(data: bytes, seconds: int) -> list[str]:
    """`stepc fmt -` on `data`: as `problems`, and exit 0 only with text that parses."""
    try:
        with time_limit(seconds):
            res = CliRunner().invoke(main, ["fmt", "-"], input=data)
    except Hang as e:
        return [f"fmt: hang: {e}"]
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return [f"fmt: internal error: {res.exception!r}"]
    if res.exit_code not in (0, 1, 2) or "Traceback" in res.output:
        return [f"fmt: exit {res.exit_code}: {res.output[-300:]!r}"]
    if res.exit_code == 0 and not _parses(res.stdout):
        return ["fmt: exit 0 with text that does not parse"]
    return []


# ------------------------------------------------------------------ what the fuzzer found
def _bundled_with(program: str, old: str, new: str) -> bytes:
    text = (BUNDLED / f"{program}.step").read_text(encoding="utf-8")
    assert old in text, (program, old)
    return text.replace(old, new, 1).encode()


# One program per class of failure found, with the commands that failed on it (each ended
# in exit 70), kept as regressions; a mutant of a bundled program runs beside its lib/.
FOUND: dict[str, tuple[bytes, tuple[str, ...]]] = {
    "stream rank of 5,001 digits (int() refuses to read it)": (
        b"stream s : Strm<Tile<bf16, [1, 64]>, 1" + b"0" * 5000
        + b'>[4, 1] = external("s")\nSink(s)\n', ("check", "analyze", "fmt")),
    "analyze's stand-in trace of 2**32 KV lengths (MemoryError)": (
        _bundled_with("attention_dynamic", "param B = 64 ", "param B = 4294967296 "),
        ("analyze",)),
}
