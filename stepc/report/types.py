"""The listing `stepc check --types` prints: every stream's type, the symbols and the facts.

Loop iterations and graph instances fold as `stepc analyze` folds them: the streams one
statement makes in every iteration (at least MIN_FOLD of them) share one line,
`moe.p[*] : Strm<..>[n_*, 1]  (128)`, where `*` stands for the indices that vary; symbols
of one family share one line (`n_0..n_127 (128 symbols)`), and facts that differ only in
their indices share one line. `--all` lists every one.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from stepc.symbol_families import MIN_FOLD, fold_names
from stepc.types import fmt_dim

if TYPE_CHECKING:
    from stepc.frontend import Compiled

KINDS = {"dynamic": "dynamic-regular", "ragged": "ragged", "param": "param"}
RELATIONS = {"Equality": "==", "Unequality": "!=", "LessThan": "<=", "GreaterThan": ">=",
             "StrictLessThan": "<", "StrictGreaterThan": ">"}
_INDEX = re.compile(r"\[\d+\]")  # an array index in a stream's name: moe.p[3]
_INDEX_GROUP = re.compile(r"\[(\d+)\]")
_SYMBOL_INDEX = re.compile(r"(?<=_)\d+(?=_|'|\W|$)")  # an index in a symbol name: n_3
_NUMBER = re.compile(r"(\d+)")  # split keeps the numbers


def types_text(result: Compiled, show_all: bool = False) -> str:
    """Every stream with its inferred type, then every symbol and where it came from, then
    the facts; iterations folded unless `show_all`."""
    typed = result.typed_program
    rows = [(f"{span.file}:{span.line}:{span.col}", label, str(t))
            for _node, _port, label, span, t in typed.streams_in_order()]
    if not show_all:
        rows = _fold_rows(rows)
    lines = []
    w0 = max((len(r[0]) for r in rows), default=0)
    w1 = max((len(r[1]) for r in rows), default=0)
    count: list[int]  # the iterations a folded row stands for
    for loc, label, t, *count in rows:
        suffix = f"  ({count[0]})" if count else ""
        lines.append(f"{loc:<{w0}}  {label:<{w1}} : {t}{suffix}")
    if typed.symbols.infos:
        lines += ["", "symbols:"]
        lines += _symbol_lines(result, show_all)
    if typed.facts:
        lines += ["", "facts:"]
        facts = [f"{fmt_dim(f.lhs)} {RELATIONS.get(type(f).__name__, '?')} {fmt_dim(f.rhs)}"
                 for f in typed.facts]
        lines += [f"  {text}" for text in (facts if show_all else _fold_texts(facts))]
    if not show_all and any(len(r) > 3 for r in rows):
        lines += ["", ("a line with a count in parentheses folds that many loop iterations "
                       "(`[*]`, `_*`: every index); --all lists each")]
    return "\n".join(lines) + "\n"


def _pattern(texts: list[str]) -> str:
    """The texts (equal but for their numbers) with the numbers that vary written `*`."""
    parts = [_NUMBER.split(t) for t in texts]
    return "".join(p[0] if len(set(p)) == 1 else "*" for p in zip(*parts, strict=True))


def _fold_rows(rows: list[tuple[str, str, str]]) -> list[tuple]:
    """Rows of one statement's iterations (same place, names and types equal but for their
    indices) as one row with their count, in the order of their first row. When the
    iterations of one statement differ in type, each row names its indices."""
    groups: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
    for loc, label, t in rows:
        key = (loc, _INDEX.sub("[*]", label), _SYMBOL_INDEX.sub("*", t))
        groups.setdefault(key, []).append((loc, label, t))
    split = Counter((loc, label) for loc, label, _ in groups)
    folded: dict[tuple[str, str, str], tuple] = {}
    for key, members in groups.items():
        loc, label, _ = key
        types = [t for _, _, t in members]
        if len(members) >= MIN_FOLD and len({len(_NUMBER.split(t)) for t in types}) == 1:
            if split[loc, label] > 1:
                label = _index_ranges([lbl for _, lbl, _ in members])
            folded[key] = (loc, label, _pattern(types), len(members))
    out: list[tuple] = []
    for loc, label, t in rows:  # a folded group where its first row was
        key = (loc, _INDEX.sub("[*]", label), _SYMBOL_INDEX.sub("*", t))
        if key not in folded:
            out.append((loc, label, t))
        elif folded[key] not in out:
            out.append(folded[key])
    return out


def _index_ranges(labels: list[str]) -> str:
    """`lanes[2..4]` for lanes[2], lanes[3], lanes[4]: the indices that vary, as ranges."""
    parts = [_INDEX_GROUP.split(label) for label in labels]
    out = []
    for k, texts in enumerate(zip(*parts, strict=True)):
        if k % 2 == 0 or len(set(texts)) == 1:
            out.append(texts[0] if k % 2 == 0 else f"[{texts[0]}]")
            continue
        values = sorted({int(t) for t in texts})
        runs: list[list[int]] = []
        for v in values:
            if runs and v == runs[-1][-1] + 1:
                runs[-1].append(v)
            else:
                runs.append([v])
        out.append("[" + ", ".join(f"{r[0]}..{r[-1]}" if len(r) > 1 else str(r[0])
                                   for r in runs) + "]")
    return "".join(out)


def _fold_texts(texts: list[str]) -> list[str]:
    """Texts equal but for the indices of their symbols as one, with their count."""
    groups: dict[str, list[str]] = {}
    for text in texts:
        groups.setdefault(_SYMBOL_INDEX.sub("*", text), []).append(text)
    out: list[str] = []
    for text in texts:
        members = groups[_SYMBOL_INDEX.sub("*", text)]
        if len(members) < MIN_FOLD or len({len(_NUMBER.split(t)) for t in members}) != 1:
            out.append(text)
        elif (line := f"{_pattern(members)}  ({len(members)})") not in out:
            out.append(line)
    return out


def _symbol_lines(result: Compiled, show_all: bool) -> list[str]:
    """One line per symbol, or (folded) per family of symbols one statement made."""
    typed = result.typed_program
    resolved = {s.name: fmt_dim(v) for s, v in typed.subst.items()}
    infos = typed.symbols.infos
    groups: dict[tuple, list[str]] = {}
    for name in infos:
        info = infos[name]
        key = (name,) if show_all else (
            _SYMBOL_INDEX.sub("*", name), info.kind, info.span,
            *(_NUMBER.sub("*", text) for text in (info.reason, info.origin,
                                                   resolved.get(name, ""))))
        groups.setdefault(key, []).append(name)
    key_of = {n: key for key, names in groups.items() for n in names}
    lines: list[str] = []
    done: set[tuple] = set()
    for name in infos:  # a folded family where its first symbol was
        names = groups[key_of[name]]
        folded = fold_names(names)
        if len(names) < MIN_FOLD and len(folded) != 1 or len(names) == 1:
            lines.append(_symbol_line(result, [name], name))
        elif key_of[name] not in done:  # one range (n_0..n_127), or `*` for what varies
            done.add(key_of[name])
            shown = folded[0] if len(folded) == 1 else _pattern(names)
            lines.append(_symbol_line(result, names, shown))
    return lines


def _symbol_line(result: Compiled, names: list[str], shown: str) -> str:
    typed = result.typed_program
    info = typed.symbols.infos[names[0]]
    resolved = {s.name: fmt_dim(v) for s, v in typed.subst.items()}
    where = f" ({info.span})" if info.span else ""
    origins = [typed.symbols.infos[n].origin for n in names]
    origin_text = origins[0] if len(set(origins)) == 1 else _pattern(origins)
    origin = f"introduced by `{origin_text}`{where}" if info.origin else f"declared{where}"
    reasons = [typed.symbols.infos[n].reason for n in names]
    reason = reasons[0] if len(set(reasons)) == 1 else _pattern(reasons)
    value = ""
    if names[0] in resolved:
        values = [resolved[n] for n in names]
        value = values[0] if len(set(values)) == 1 else (
            fold_names(values)[0] if len(fold_names(values)) == 1 else _pattern(values))
        value = f" = {value} (assumed)"
    count = f" ({len(names)} symbols)" if len(names) > 1 else ""
    return f"  {shown}{count}{value}: {KINDS[info.kind]}, {origin}: {reason}"
