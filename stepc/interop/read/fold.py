"""Folding repeated statements of an imported graph into `for` loops.

The reference frontend unrolls its per-expert (per-region) sub-graphs, so an imported MoE
layer repeats each statement 128 times with ids and output indices that step by a
constant. A run of consecutive statements that differ only in such numbers becomes one
loop; a name bound in the run becomes an array (`reshape_6[e]`), and every later use of one
of its names is rewritten to the array element. Consecutive loops over the same range share
one body. Where runs of one statement repeat block by block (region r's expert e: ids
stepping by one along e and by eight along r), the blocks become one nest of two loops whose
statement fills a flat array (`x[8 * r + e] = ..`), so later runs read it by one index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_RUN = 4  # shorter repeats stay unrolled
LOOP_VAR = "e"
OUTER_VAR = "r"  # the outer loop of a nest (the regions of a time-multiplexed layer)
_TOKEN = re.compile(r"\b([A-Za-z][A-Za-z_]*?)_(\d+)\b|\[(\d+)\]")
_TARGETS = re.compile(r"^((?:[a-z][a-z_0-9]*, )*[a-z][a-z_0-9]*) = ", re.MULTILINE)


@dataclass
class Folded:
    """A folded program body: the tensor declarations, the lines, each statement's run of
    units (first unit, count) in order, and each unrolled name's array element."""

    tensors: list[str]
    body: list[str]
    runs: list[tuple[int, int]]
    renamed: dict[str, str]


@dataclass
class Unit:
    """One statement (with the assumptions stated just before it) and its comment."""

    code: str
    comment: str


def _numbers(text: str) -> list[int]:
    return [int(m.group(2) or m.group(3)) for m in _TOKEN.finditer(text)]


def _signature(text: str) -> str:
    return _TOKEN.sub(lambda m: "[#]" if m.group(3) else f"{m.group(1)}_#", text)


def fold(units: list[Unit], tensors: list[str]) -> Folded:
    """The tensor declarations and the program body, runs of repeated statements as loops
    (the tensors each iteration of a run reads, all alike, stacked into one)."""
    sigs = [(_signature(u.code), _numbers(u.code)) for u in units]
    decls = {d.split()[1]: d for d in tensors}
    stacks: dict[str, list[str]] = {}  # stacked tensor -> the tensors it holds, in order
    renamed: dict[str, str] = {}  # folded name -> its array element
    ctx = (renamed, decls, stacks)
    sizes: dict[str, int] = {}  # folded array -> its length
    lines: list[str] = []
    runs: list[tuple[int, int]] = []
    loop: int | None = None  # the range of the loop being written
    bound: set[str] = set()  # the names its body binds so far
    run_at = _run_lengths(sigs)
    i = 0
    while i < len(units):
        n = run_at[i]
        m = _blocks(sigs, run_at, i, n)
        nest = _nest(units, sigs, i, m, n, ctx) if m >= MIN_RUN else None
        if nest is not None:
            if loop is not None:
                lines.append("}")
                loop, bound = None, set()
            lines += nest[0]
            sizes.update(dict.fromkeys(nest[1], m * n))
            runs.append((i, m * n))
            i += m * n
            continue
        body = None
        if n >= MIN_RUN:
            body = _loop_body(units, sigs, i, n, ctx, bound if loop == n else set())
            if body is _NEW_LOOP:  # reads another iteration of this loop: after it
                lines.append("}")
                loop, bound = None, set()
                body = _loop_body(units, sigs, i, n, ctx, set())
        if body is None:  # the run stays unrolled (what is left of it is not tried again:
            # linear time); its last unit may start another run
            n = max(n - 1, 1)
            if loop is not None:
                lines.append("}")
                loop, bound = None, set()
            for k in range(i, i + n):
                lines.append(f"{_rename(units[k].code, renamed)}  # {units[k].comment}")
                runs.append((k, 1))
            i += n
            continue
        if loop != n:
            if loop is not None:
                lines.append("}")
            lines.append(f"for {LOOP_VAR} in 0..{n} {{")
            loop, bound = n, set()
        lines += body[0]
        bound |= body[1]
        sizes.update(dict.fromkeys(body[1], n))
        runs.append((i, n))
        i += n
    if loop is not None:
        lines.append("}")
    members = {t for group in stacks.values() for t in group}
    out_decls = []
    for d in tensors:
        name = d.split()[1]
        if name in stacks:
            kind, role = d.split(" : ", 1)[1].split("[", 1)
            out_decls.append(f"tensor {name} : {kind}[{len(stacks[name])}, {role}")
        elif name not in members:
            out_decls.append(d)
    return Folded(out_decls, [_whole_arrays(line, sizes) for line in lines], runs, renamed)


# a run that must start a loop of its own
_NEW_LOOP: tuple[list[str], set[str]] = ([], set())


def _run_lengths(sigs) -> list[int]:
    """Per unit, the length of the run of units from it whose numbers step by one nonzero
    constant (1: none), in one pass from the end."""
    steps = [[b - a for a, b in zip(sigs[i][1], sigs[i + 1][1])]
             if sigs[i + 1][0] == sigs[i][0] else None for i in range(len(sigs) - 1)]
    runs = [1] * len(sigs)
    for i in range(len(sigs) - 2, -1, -1):
        step = steps[i]
        if step is None or not any(step):
            continue
        runs[i] = runs[i + 1] + 1 if i + 1 < len(steps) and steps[i + 1] == step else 2
    return runs


def _blocks(sigs, run_at: list[int], i: int, n: int) -> int:
    """How many consecutive blocks of `n` units from `i` repeat the first block's run, each
    block's numbers the first's plus a constant step per block."""
    if n < 2:
        return 1
    sig, first = sigs[i]
    inner = [b - a for a, b in zip(first, sigs[i + 1][1])]
    outer: list[int] = []
    m = 1
    while i + (m + 1) * n <= len(sigs):
        j = i + m * n
        if sigs[j][0] != sig or run_at[j] < n or \
                [b - a for a, b in zip(sigs[j][1], sigs[j + 1][1])] != inner:
            break
        step = [b - a for a, b in zip(first, sigs[j][1])]
        if m == 1:
            outer = step
        elif step != [m * d for d in outer]:
            break
        m += 1
    return m


def _nest(units: list[Unit], sigs, i: int, m: int, n: int,
          ctx) -> tuple[list[str], set[str]] | None:
    """`m` blocks of `n` units as two nested loops, each bound name a flat array filled at
    `n * r + e`, and the names bound; None when a varying name is not an element of one
    array at an index affine in the two loop variables, or the statement binds several."""
    renamed, decls, stacks = ctx
    code = units[i].code
    first = sigs[i][1]
    inner = [b - a for a, b in zip(first, sigs[i + 1][1])]
    outer = [b - a for a, b in zip(first, sigs[i + n][1])]
    targets = {t for mt in _TARGETS.finditer(code) for t in mt.group(1).split(", ")}
    if len(targets) != 1:
        return None
    flat = _affine2(0, n, 1)
    new: dict[str, str] = {}
    stacked: dict[str, list[str]] = {}
    parts: list[str] = []
    pos = 0
    for j, mt in enumerate(_TOKEN.finditer(code)):
        parts.append(code[pos:mt.start()])
        pos = mt.end()
        a, di, do = first[j], inner[j], outer[j]
        names = [f"{mt.group(1)}_{a + r * do + e * di}" for r in range(m) for e in range(n)]
        if mt.group(3) is not None:  # an output index
            parts.append(f"[{_affine2(a, do, di)}]")
        elif mt.group(0) in targets:
            new.update({x: f"{mt.group(0)}[{k}]" for k, x in enumerate(names)})
            parts.append(f"{mt.group(0)}[{flat}]")
        elif not (di or do):
            parts.append(renamed.get(mt.group(0), mt.group(0)))
        elif mt.group(0) in decls:  # a tensor per iteration: stack them
            if not _alike(names, decls):
                return None
            stacked[mt.group(0)] = names
            parts.append(f"{mt.group(0)}[{flat}]")
        else:
            index = _indices2([renamed.get(x) for x in names], n)
            if index is None:
                return None
            parts.append(index)
    parts.append(code[pos:])
    renamed.update(new)
    stacks.update(stacked)
    body = _noted_body("".join(parts), units, i, "        ")
    return ([f"for {OUTER_VAR} in 0..{m} {{", f"    for {LOOP_VAR} in 0..{n} {{"] + body +
            ["    }", "}"], targets)


def _indices2(elems: list[str | None], n: int) -> str | None:
    """`a[i0 + io * r + ie * e]` when the elements (r-major) are elements of one array at an
    index affine in the two loop variables."""
    names = [x for x in elems if x is not None]
    if len(names) < len(elems):
        return None
    pairs = [x.rsplit("[", 1) for x in names]
    arrays = {a for a, _ in pairs}
    digits = [i[:-1] for _, i in pairs]
    if len(arrays) > 1 or not all(d.isdigit() for d in digits):
        return None
    idx = [int(d) for d in digits]
    i0, ie, io = idx[0], idx[1] - idx[0], idx[n] - idx[0]
    if any(v != i0 + (k // n) * io + (k % n) * ie for k, v in enumerate(idx)):
        return None
    return f"{arrays.pop()}[{_affine2(i0, io, ie)}]"


def _affine2(a: int, do: int, di: int) -> str:
    """`a + do * r + di * e`, written as a person would."""
    terms = [f"{'' if d == 1 else f'{d} * '}{v}" for d, v in ((do, OUTER_VAR), (di, LOOP_VAR))
             if d]
    text = " + ".join(terms).replace("+ -", "- ")
    if not text:
        return str(a)
    return text if a == 0 else f"{text} + {a}" if a > 0 else f"{text} - {-a}"


def _loop_body(units: list[Unit], sigs, i: int, n: int, ctx,
               bound: set[str]) -> tuple[list[str], set[str]] | None:
    """The run's first statement with its varying numbers written in the loop variable, and
    the names it binds; None when a varying name is not an element of an earlier loop's
    array, _NEW_LOOP when it reads another iteration of a name `bound` in the open loop."""
    renamed, decls, stacks = ctx
    code = units[i].code
    first = sigs[i][1]
    stacked: dict[str, list[str]] = {}
    step = [b - a for a, b in zip(first, sigs[i + 1][1])]
    targets = {t for m in _TARGETS.finditer(code) for t in m.group(1).split(", ")}
    new: dict[str, str] = {}
    parts: list[str] = []
    pos = 0
    for j, m in enumerate(_TOKEN.finditer(code)):
        parts.append(code[pos:m.start()])
        pos = m.end()
        a, d = first[j], step[j]
        if m.group(3) is not None:  # an output index
            parts.append(f"[{_affine(a, d)}]" if d else m.group(0))
        elif m.group(0) in targets:
            for k in range(n):
                new[f"{m.group(1)}_{a + k * d}"] = f"{m.group(0)}[{k}]"
            parts.append(m.group(0))
        elif not d:
            ref = renamed.get(m.group(0), m.group(0))
            if ref.split("[", 1)[0] in bound:
                return _NEW_LOOP
            parts.append(ref)
        elif m.group(0) in decls:  # a tensor per iteration: stack them
            group = [f"{m.group(1)}_{a + k * d}" for k in range(n)]
            if not _alike(group, decls):
                return None
            stacked[m.group(0)] = group
            parts.append(f"{m.group(0)}[{LOOP_VAR}]")
        else:
            elems = [renamed.get(f"{m.group(1)}_{a + k * d}") for k in range(n)]
            index = _indices(elems)
            if index is None:
                return None
            array = index.split("[", 1)[0]
            if array in bound:
                if index != f"{array}[{LOOP_VAR}]":
                    return _NEW_LOOP
                index = array  # this iteration's value
            parts.append(index)
    parts.append(code[pos:])
    renamed.update(new)
    stacks.update(stacked)
    return _noted_body("".join(parts), units, i, "    "), targets


def _noted_body(code: str, units: list[Unit], i: int, indent: str) -> list[str]:
    """A loop body's lines, indented, the run's note on the last."""
    text = code.splitlines()
    note = _run_note(units, i)
    return [f"{indent}{line}" + (f"  # {note}" if j == len(text) - 1 else "")
            for j, line in enumerate(text)]


def _run_note(units: list[Unit], i: int) -> str:
    """The comment of a folded run: its first two source ops (`ops 6, 7, ..`)."""
    ops = [re.findall(r"op (\d+)", units[i + k].comment)[:1] for k in (0, 1)]
    return f"ops {ops[0][0]}, {ops[1][0]}, .." if all(ops) else units[i].comment


def _alike(group: list[str], decls: dict[str, str]) -> bool:
    """Tensors declared alike (type, shape, role; no data source), so one stack holds them."""
    if any(t not in decls for t in group):
        return False
    rests = {decls[t].split(" : ", 1)[1] for t in group}
    return len(rests) == 1 and "=" not in next(iter(rests))


def _indices(elems: list[str | None]) -> str | None:
    """`a[start + step * e]` when the elements are evenly spaced elements of one array."""
    if any(x is None for x in elems):
        return None
    pairs = [x.rsplit("[", 1) for x in elems]  # type: ignore[union-attr]
    arrays = {a for a, _ in pairs}
    idx = [int(i[:-1]) for _, i in pairs]
    d = idx[1] - idx[0]
    if len(arrays) > 1 or any(v != idx[0] + k * d for k, v in enumerate(idx)):
        return None
    return f"{arrays.pop()}[{_affine(idx[0], d)}]"


def _affine(a: int, d: int) -> str:
    term = LOOP_VAR if d == 1 else f"{d} * {LOOP_VAR}"
    return term if a == 0 else f"{term} + {a}" if a > 0 else f"{term} - {-a}"


def _rename(code: str, renamed: dict[str, str]) -> str:
    return _TOKEN.sub(lambda m: m.group(0) if m.group(3) else renamed.get(m.group(0),
                                                                          m.group(0)), code)


def _whole_arrays(line: str, sizes: dict[str, int]) -> str:
    """`[x[0], x[1], .., x[n-1]]` (a whole folded array, in order) is written `x`."""
    def sub(m: re.Match) -> str:
        items = [s.strip() for s in m.group(1).split(",")]
        head = items[0].rsplit("[", 1)[0]
        if sizes.get(head) == len(items) and all(s == f"{head}[{k}]"
                                                 for k, s in enumerate(items)):
            return head
        return m.group(0)
    return re.sub(r"\[((?:\s*[a-z][a-z_0-9]*\[\d+\]\s*,)+\s*[a-z][a-z_0-9]*\[\d+\]\s*)\]", sub,
                  line)
