"""Every speed figure in README.md, docs/*.md and benchmarks/README.md names the script in
`benchmarks/` that prints it and the load average the machine had when it printed it.

A speed figure is a time (`0.83 s`, `7 ms`, `3 min 55 s`, `7.6 CPU-minutes`), a rate per
second (`450 k cycles/s`, `13.9 M requests/s`) or a speed ratio (`6x faster`, `1.2x
slower`, `speedup of 2x`), in prose or in a table, or any number in a table column whose
header is a time or a speedup (`tune s`, `textX ms`, `check (s)`, `speedup`). Its
context is its paragraph or table, for a table also the prose right before and after it
(the caption), and the heading of its section (for the script only): that context must
name an existing `benchmarks/*.py` and state a load (`load average 2.1`, `load 5 to 6`).

Not claims, and so not checked (the allow list, each entry a kind of text whose numbers
are not measurements of stepc's speed):
- code: fenced blocks and inline code spans hold commands, options, program text and
  example output (`--time-limit 5`, a log line `checked ... in 0.12 s`);
- settings and goals: a number shortly after `default`, `limit`, `timeout`, `pause`,
  `debounce`, `wait`, `budget`, `deadline` or `target`, or right before `by default`,
  `pause`, `debounce`, `timeout`, `limit` or `deadline` (an option's value, the LSP's debounce, an
  issue's target), and table columns headed `target`;
- simulated hardware: a sentence with `ns`, `tCK`, `nRFC`, `refresh`, `GHz` or `MHz`
  (the `us` of a DRAM refresh interval is the memory's time, not the simulator's);
- simulated schedules: a ratio (`1.65x faster`) whose sentence or table row compares the
  paper's schedules (tile, static, dynamic, interleaved, coarse, time-multiplexed,
  contiguous, strided): those are ratios of simulated cycles, not of run time.
Numbers without a time or rate unit (cycle counts, bytes, sizes, `B/cycle`, `GB/s`) never
match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_NUM = r"(?<![\w.])\d+(?:[.,]\d+)*(?:\s?(?:-|–|to)\s?\d+(?:\.\d+)?)?"
TIME = re.compile(_NUM + r"\s?(?:ms|µs|CPU[- ](?:s|seconds|minutes)\b|seconds?\b|minutes?\b"
                  r"|hours?\b)|" + _NUM + r" (?:s|us|min|h)\b")
RATE = re.compile(_NUM + r"\s?(?:[kMG]\s?)?(?:requests|cycles|points|tests|programs|"
                  r"operators|firings|elements|simulations|checks|parses|tokens|ops)?"
                  r"\s?(?:/s\b|per second)")
RATIO = re.compile(_NUM + r"\s?(?:x|×|times)\s(?:faster|slower|quicker|the speed)|"
                   r"speed-?up of " + _NUM + r"\s?x")
SPEED = (TIME, RATE, RATIO)
SETTING = re.compile(r"\b(?:default|limit|timeout|pause|debounce|wait|waits|budget|"
                     r"deadline|target)\b[^.;|]{0,30}$", re.I)
SETTING_NAMED_AFTER = re.compile(r"^,?\s?(?:by default|pause|debounce|timeout|time limit|"
                                 r"limit|deadline)\b")
HARDWARE = re.compile(r"\b(?:ns|tCK|nRFC|refresh|GHz|MHz)\b")
SCHEDULE = re.compile(r"\b(?:tiles?|static|dynamic|interleaved|coarse|time-multiplexed|"
                      r"contiguous|strided)\b", re.I)
TIME_COLUMN = re.compile(r"(?:^|\s|\()(?:s|ms|µs|seconds)\)?$|speedup", re.I)
SCRIPT = re.compile(r"benchmarks/(\w+\.py)")
LOAD = re.compile(r"\bload(?:\s+averages?)?(?:\s+(?:of|about|below|under|at|around|from))?"
                  r"\s*[:~<≤]?\s*\d", re.I)
CODE_SPAN = re.compile(r"`[^`]*`")
SENTENCE_END = re.compile(r"[.;!?](?=\s)|\n\n")



@dataclass
class Block:
    """A paragraph, table or heading of a markdown file, code spans blanked out."""

    kind: str  # "prose", "table" or "heading"
    line: int  # 1-based line of its first line
    lines: list[str]  # code spans blanked: where figures are looked for
    raw: list[str]  # as written: where the script and the load are looked for

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def raw_text(self) -> str:
        return "\n".join(self.raw)


def blocks(markdown: str) -> list[Block]:
    """The file's blocks in order, fenced code left out and inline code blanked."""
    out: list[Block] = []
    current: list[str] = []
    raw_lines: list[str] = []
    start, fenced = 0, False

    def close() -> None:
        if current:
            kind = "table" if all(ln.lstrip().startswith("|") for ln in current) else "prose"
            out.append(Block(kind, start, list(current), list(raw_lines)))
            current.clear()
            raw_lines.clear()

    for number, raw in enumerate(markdown.splitlines(), 1):
        if raw.lstrip().startswith("```"):
            close()
            fenced = not fenced
            continue
        if fenced:
            continue
        line = CODE_SPAN.sub(lambda m: " " * len(m.group()), raw)
        if not line.strip():
            close()
        elif line.startswith("#"):
            close()
            out.append(Block("heading", number, [line], [raw]))
        else:
            if not current:
                start = number
            elif (line.lstrip().startswith("|")) != (current[-1].lstrip().startswith("|")):
                close()
                start = number
            current.append(line)
            raw_lines.append(raw)
    close()
    return out


def _sentence(text: str, pos: int) -> str:
    starts = [m.end() for m in SENTENCE_END.finditer(text, 0, pos)]
    end = SENTENCE_END.search(text, pos)
    return text[starts[-1] if starts else 0:end.start() if end else len(text)]


def _claims_in(text: str) -> list[tuple[int, str]]:
    """(offset, figure) of each speed figure in `text` that no allow-list rule excuses."""
    found = []
    for pattern in SPEED:
        for m in pattern.finditer(text):
            sentence = _sentence(text, m.start())
            if SETTING.search(text[max(0, m.start() - 40):m.start()]) or \
                    SETTING_NAMED_AFTER.search(text[m.end():m.end() + 20]):
                continue
            if HARDWARE.search(sentence):
                continue
            if pattern is RATIO and SCHEDULE.search(sentence):
                continue
            found.append((m.start(), m.group()))
    return found


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def speed_figures(block: Block) -> list[tuple[int, str]]:
    """(line, figure) of each speed claim in the block."""
    if block.kind != "table":
        text = block.text
        return [(block.line + text.count("\n", 0, pos), fig) for pos, fig in _claims_in(text)]
    header = _cells(block.lines[0])
    timed = {i for i, h in enumerate(header) if TIME_COLUMN.search(h)}
    targets = {i for i, h in enumerate(header) if re.search(r"\btarget\b", h, re.I)}
    found = []
    for k, row in enumerate(block.lines[2:], 2):
        cells = _cells(row)
        for i, cell in enumerate(cells):
            if i in targets:
                continue
            if i in timed and re.search(r"\d", cell):
                found.append((block.line + k, f"{header[i]}: {cell}"))
            elif i not in timed:
                # a row compares the paper's schedules when any of its cells names one
                row_text = " ; ".join(cells) if i else cell
                found += [(block.line + k, fig) for _, fig in _claims_in(cell)
                          if not (RATIO.search(fig) and SCHEDULE.search(row_text))]
    return found


def _context(bs: list[Block], i: int) -> tuple[str, str]:
    """(text naming the script, text stating the load) for block `i`'s figures."""
    own = [bs[i].raw_text]
    if bs[i].kind == "table":
        own += [b.raw_text for b in (bs[i - 1] if i else None, bs[i + 1] if i + 1 < len(bs)
                                 else None) if b is not None and b.kind == "prose"]
    heading = next((b.raw_text for b in reversed(bs[:i]) if b.kind == "heading"), "")
    return "\n".join(own + [heading]), "\n".join(own)


def problems(root: Path) -> list[str]:
    """Every speed figure under `root` whose context lacks a script or a load."""
    files = [root / "README.md", root / "benchmarks" / "README.md",
             *sorted((root / "docs").glob("*.md"))]
    out = []
    for path in files:
        name = path.relative_to(root).as_posix()
        bs = blocks(path.read_text(encoding="utf-8"))
        for i, block in enumerate(bs):
            figures = speed_figures(block)
            if not figures:
                continue
            names, loads = _context(bs, i)
            scripts = [s for s in SCRIPT.findall(names) if (root / "benchmarks" / s).is_file()]
            for line, figure in figures:
                if not scripts:
                    out.append(f"{name}:{line}: `{figure}`: its paragraph, caption or "
                               f"heading names no existing benchmarks/*.py script")
                elif not LOAD.search(loads):
                    out.append(f"{name}:{line}: `{figure}`: its paragraph or caption "
                               f"states no load average")
    return out


def test_every_speed_figure_names_its_script_and_load():
    found = problems(ROOT)
    assert not found, "\n".join(found)


def _figures(text: str) -> list[str]:
    return [fig for b in blocks(text) for _, fig in speed_figures(b)]


def test_the_pattern_finds_speed_figures():
    assert _figures("The server re-checks in 0.83 s.") == ["0.83 s"]
    assert _figures("Parsing is now 6x faster.") == ["6x faster"]
    assert _figures("It simulates 450 k cycles/s.") == ["450 k cycles/s"]
    assert _figures("The suite takes 3 min 55 s.") == ["3 min", "55 s"]
    assert _figures("7.6 CPU-minutes in all, hovers in 7 ms.") == ["7.6 CPU-minutes", "7 ms"]
    table = "| program | first | tune s |\n|---|---|---|\n| swiglu | 0.05 s | 1.2 |\n"
    assert _figures(table) == ["0.05 s", "tune s: 1.2"]


def test_numbers_that_are_not_speed_figures_pass():
    for text in ["Tile 16 takes 710,146 cycles and 4,096 bytes.",
                 "`stepc tasks check --time-limit 5` stops the run.",
                 "Each check waits for the first one (at most 5 s).",
                 "The candidate's limit (default 10 s) applies.",
                 "A wall-clock limit (the task's own, 10 s, by default) applies.",
                 "Diagnostics come after a 0.3 s pause.",
                 "HBM2 at 2.0 Gb/s, 32 GB/s per channel, nRFC = 350 ns every 3.9 us.",
                 "Dynamic is 1.65x faster than tile 16.",
                 "| claim | paper |\n|---|---|\n| dynamic is 1.87x faster than tile 64 | 1.87 |",
                 "| job | target | median |\n|---|---|---|\n| check | 0.5 s |",
                 "```sh\nstepc sim --time-limit 5 x.step  # 0.83 s\n```",
                 "Rows of 100s overflow f32's exp."]:
        assert _figures(text) == [], text


def test_a_figure_passes_only_with_its_script_and_load(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks" / "bench_x.py").write_text("", encoding="utf-8")
    (tmp_path / "benchmarks" / "README.md").write_text("# Benchmarks\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    for text, ok in [("It re-checks in 0.83 s.", False),
                     ("It re-checks in 0.83 s (`benchmarks/bench_x.py`).", False),
                     ("It re-checks in 0.83 s (`benchmarks/bench_y.py`, load average 2).",
                      False),
                     ("It re-checks in 0.83 s (`benchmarks/bench_x.py`, load average 2.1).",
                      True),
                     ("It re-checks in 0.83 s (`benchmarks/bench_x.py`, load\naverage 2.1).",
                      True),
                     ("## Speed (`benchmarks/bench_x.py`)\n\nParsing is 6x faster at "
                      "load 3.", True),
                     ("Measured at load 1 by `benchmarks/bench_x.py`:\n\n| program | fast ms |"
                      "\n|---|---|\n| a | 1.2 |", True),
                     ("| program | fast ms |\n|---|---|\n| a | 1.2 |", False)]:
        readme.write_text(text + "\n", encoding="utf-8")
        found = problems(tmp_path)
        assert (found == []) == ok, (text, found)
        assert all(f.startswith("README.md:") for f in found)
