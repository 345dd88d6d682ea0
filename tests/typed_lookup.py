"""A compiled program with its inferred types looked up by stream label (shared by the
shape-rule and paper-example tests)."""

from __future__ import annotations

import sympy

from stepc.diagnostics import Severity


class Compiled:
    """Diagnostics and type lookups of a compile result (`self.c`)."""

    def __init__(self, compiled):
        self.c = compiled
        assert compiled.typed is not None, self.report()

    @property
    def errors(self):
        return [d for d in self.c.diagnostics.items if d.severity is Severity.ERROR]

    @property
    def warnings(self):
        return [d for d in self.c.diagnostics.items if d.severity is Severity.WARNING]

    def report(self) -> str:
        return "\n".join(f"{d.span}: {d.severity.value}[{d.code}] {d.message}"
                         for d in self.c.diagnostics.items) or "(no diagnostics)"

    def ok(self):
        assert not self.errors, self.report()
        return self

    def node_port(self, label: str):
        for node in self.c.typed.program.nodes.values():
            if node.implicit:
                continue
            for port in range(len(node.outputs)):
                if node.port_label(port) == label:
                    return node, port
        labels = [nd.port_label(i) for nd in self.c.typed.program.nodes.values()
                  for i in range(len(nd.outputs))]
        raise KeyError(f"no stream `{label}`; streams: {', '.join(labels)}")

    def type(self, label: str):
        node, port = self.node_port(label)
        t = self.c.typed.types.get((node.name, port))
        assert t is not None, f"stream `{label}` has no type\n{self.report()}"
        return t

    def shape(self, label: str):
        return self.type(label).shape

    def sym(self, name: str) -> sympy.Symbol:
        s = self.c.typed.symbols.get(name)
        assert s is not None, f"no symbol {name}: {list(self.c.typed.symbols.infos)}"
        return s

    def kind(self, dim) -> str:
        return self.c.typed.symbols.kind_of(sympy.sympify(dim))
