"""Confirming searched FIFO depths by a second route: the program's files as `--apply`
writes them (the depths as `depth=` attributes, imported files included) are compiled from
that text and simulated, and the run's cycles and FIFO bytes are the search's."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from stepc.fifo.apply import CallDepths, with_depths
from stepc.fifo.capacity import fifo_bytes, input_depths
from stepc.fifo.search import FifoClass


@dataclass
class Confirmation:
    """The run of the program with the depths written into its text."""

    texts: dict[str, str]  # file -> its text with the depths (the files that change)
    calls: int  # calls whose `depth=` the depths change
    cycles: int  # 0: it deadlocked
    fifo_bytes: int | None  # `--fifo-bytes` of that run
    errors: list[str] = field(default_factory=list)  # the edited program's, if any

    def disagreement(self, cycles: int, total: int | None) -> str | None:
        """Why this run does not confirm the search's `cycles` and FIFO bytes `total`."""
        if self.errors:
            return "the program with the depths written does not compile: " + \
                "; ".join(self.errors)
        if not self.cycles:
            return f"the program with the depths written deadlocks (the search ran {cycles:,} " \
                "cycles with them)"
        if self.cycles != cycles:
            return f"the program with the depths written runs {self.cycles:,} cycles, the " \
                f"search {cycles:,}"
        if self.fifo_bytes != total:
            return f"the program with the depths written holds {self.fifo_bytes} FIFO bytes, " \
                f"the search counted {total}"
        return None


def applied_texts(typed, sources: dict, classes: list[FifoClass], preset: int
                  ) -> tuple[dict[str, str], int]:
    """The text of each file whose calls take other depths than they state, with the
    classes' depths written as `depth=` in the layout of `stepc fmt`, and the calls edited."""
    from stepc.grammar.format import format_source

    nodes = typed.program.nodes
    calls: dict[str, dict[str, CallDepths]] = {}  # file -> call location -> its depths
    changed: set[str] = set()  # the calls whose FIFOs do not all state their depth
    for c in classes:
        if not c.settable:
            continue
        node = nodes[c.edges[0][2]]
        current = input_depths(node, preset)
        span = node.span
        call = calls.setdefault(span.file, {}).setdefault(
            str(span), CallDepths(span, len(current), current, {}))
        call.depths[c.key[1]] = c.depth  # every input: the search ran every FIFO at it
        if any(input_depths(nodes[k[2]], preset)[c.key[1]] != c.depth for k in c.edges):
            changed.add(str(span))
    calls = {name: {k: v for k, v in edits.items() if k in changed}
             for name, edits in calls.items()}
    calls = {name: edits for name, edits in calls.items() if edits}
    texts = {name: format_source(with_depths(sources[name].text, list(edits.values())), name)
             for name, edits in calls.items()}
    return texts, sum(len(edits) for edits in calls.values())


def confirm(compiled, classes: list[FifoClass], hw, traces=None,
            bindings: dict | None = None) -> Confirmation:
    """Compile the program from its text with the classes' depths written and simulate it
    (timing only) with no depth given from outside: its cycles and FIFO bytes."""
    from stepc.frontend import compile_files
    from stepc.measure import measure

    typed, sources = compiled.typed, compiled.sources
    texts, calls = applied_texts(typed, sources, classes, hw.fabric.fifo_depth)
    files = {name: texts.get(name, src.text).encode("utf-8") for name, src in sources.items()}
    again = compile_files(files, compiled.name, dict(typed.program.params))
    if not again.ok:
        return Confirmation(texts, calls, 0, None,
                            [f"{d.span}: {d.message}" for d in again.diagnostics.errors]
                            or ["too large to check"])
    m = measure(again.typed, hw, traces, functional=False)
    if m.deadlocked:
        return Confirmation(texts, calls, 0, None)
    total = fifo_bytes(again.typed, hw, {**m.result.bindings, **(bindings or {})})
    return Confirmation(texts, calls, m.result.cycles,
                        int(total) if total.is_number else None)


def write_texts(texts: dict[str, str]) -> None:
    """Write each file's text through a temporary file and a rename, after checking that
    every one of them can be written."""
    from stepc.sim.report import write_atomic

    for path in texts:
        if not os.path.isfile(path) or not os.access(path, os.W_OK) or \
                not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
            raise PermissionError(path)
    for path, text in texts.items():
        write_atomic(path, lambda f, text=text: f.write(text.encode("utf-8")))
