"""DOT text for a checked program: operators colored by family, streams labeled with their
symbolic shape (red) and element type (gray), loop iterations and graph instances as
clusters, feedback streams dashed. Output is deterministic (source order, no ids).

`--collapse` folds every iteration of a `for` loop after the first onto the first, so a
128-expert MoE draws one expert labeled "x128". A `heat` map (node -> fraction, note)
shades nodes: `analysis_heat` shades by share of off-chip traffic; a simulator can shade
by busy fraction through the same hook.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass

import sympy

from stepc.graph.program import Cluster, OpNode
from stepc.ops import OPS
from stepc.ops.base import fmt_attr
from stepc.typecheck.checker import TypedProgram
from stepc.types import fmt_shape

LARGE_GRAPH = 500  # operators above which an uncollapsed diagram is illegible

FAMILY_COLORS = {
    "offchip": "#d0d0d0",
    "onchip": "#fdd49e",
    "routing": "#f4a6a6",
    "higher_order": "#a6dcdc",
    "shape": "#fff2a8",
    "source": "#c6dbef",
    "sink": "#ececec",
}
HIDDEN_ATTRS = {"depth", "dim", "type"}


@dataclass(frozen=True)
class Heat:
    """How hot a node is (0..1) and a short note shown under its name."""

    fraction: float
    note: str = ""


def _shade(fraction: float) -> str:
    f = min(max(fraction, 0.0), 1.0)
    g = int(round(255 - 190 * f))
    return f"#ff{g:02x}{g:02x}"


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def node_attrs_text(node: OpNode) -> str:
    """The operator's key attributes, `name=value`, skipping defaults and hardware knobs."""
    spec = OPS[node.op]
    parts = []
    for p in spec.params:
        if p.is_stream or p.name in HIDDEN_ATTRS or p.name not in node.attrs:
            continue
        v = node.attrs[p.name]
        if v is None or (not p.required and v == p.default):
            continue
        parts.append(str(v) if p.kind == "tensor" else f"{p.name}={fmt_attr(v)}")
    return " ".join(parts)


class DotWriter:
    def __init__(self, typed: TypedProgram, collapse: bool = False,
                 heat: Mapping[str, Heat] | None = None, title: str | None = None):
        self.typed, self.prog = typed, typed.program
        self.collapse, self.heat = collapse, heat or {}
        self.title = title
        self.rep, self.fold = self._fold() if collapse else ({}, {})
        if self.rep and self.heat:
            self.heat = self._fold_heat(self.heat)

    def _fold_heat(self, heat: Mapping[str, Heat]) -> dict[str, Heat]:
        """A folded node's heat is the sum over the instances it stands for."""
        out: dict[str, Heat] = {}
        for name, h in heat.items():
            rep = self.rep.get(name, name)
            prev = out.get(rep)
            out[rep] = Heat(h.fraction + (prev.fraction if prev else 0.0),
                            prev.note if prev else h.note)
        for rep, n in self.fold.items():
            if rep in out and n > 1:
                out[rep] = Heat(out[rep].fraction, f"x{n}: {100 * out[rep].fraction:.1f}% "
                                f"of traffic in all" if out[rep].fraction else out[rep].note)
        return out

    # ------------------------------------------------------------ folding
    def _fold(self) -> tuple[dict[str, str], dict[str, int]]:
        """Map nodes of later loop iterations to the same node of the first iteration."""
        rep: dict[str, str] = {}
        count: dict[str, int] = {}
        groups: dict[str, dict[str, list[str]]] = {}
        for name, node in self.prog.nodes.items():
            for c in node.cluster:
                if c.kind == "loop":
                    groups.setdefault(c.group, {}).setdefault(c.key, []).append(name)
        for iterations in groups.values():
            keys = list(iterations)
            first = iterations[keys[0]]
            if any(len(iterations[k]) != len(first) for k in keys):
                continue
            for k in keys[1:]:
                for j, name in enumerate(iterations[k]):
                    rep.setdefault(name, first[j])
            for name in first:
                count[name] = count.get(name, 1) * len(keys)
        for name in rep:  # resolve chains from nested loops
            while rep[name] in rep:
                rep[name] = rep[rep[name]]
        return rep, count

    def visible(self, name: str) -> str:
        return self.rep.get(name, name)

    def folded_clusters(self) -> dict[str, int]:
        """Loop cluster key of a first iteration -> number of iterations folded into it."""
        out: dict[str, int] = {}
        seen: dict[str, set] = {}
        for node in self.prog.nodes.values():
            for c in node.cluster:
                if c.kind == "loop":
                    seen.setdefault(c.group, set()).add(c.key)
        firsts: dict[str, str] = {}
        for node in self.prog.nodes.values():
            for c in node.cluster:
                if c.kind == "loop":
                    firsts.setdefault(c.group, c.key)
        for group, key in firsts.items():
            out[key] = len(seen[group])
        return out

    # ------------------------------------------------------------ nodes
    def node_label(self, node: OpNode) -> str:
        rows = [f"<B>{_esc(node.name)}</B>"]
        op = node.op + (" (fan-out)" if node.implicit else "")
        attrs = node_attrs_text(node)
        rows.append(_esc(op) + (f" <FONT POINT-SIZE=\"9\">{_esc(attrs)}</FONT>" if attrs
                                else ""))
        h = self.heat.get(node.name)
        if h is not None and h.note:
            rows.append(f"<FONT POINT-SIZE=\"9\">{_esc(h.note)}</FONT>")
        ports = self.ports(node)
        width = max(1, len(ports))
        head = "".join(f"<TR><TD COLSPAN=\"{width}\" BORDER=\"0\">{r}</TD></TR>" for r in rows)
        tail = ""
        if ports:
            names = [f"[{p}]" if node.array_outputs else node.outputs[p] for p in ports]
            cells = "".join(f"<TD PORT=\"o{p}\" CELLPADDING=\"1\"><FONT POINT-SIZE=\"8\">"
                            f"{_esc(n)}</FONT></TD>" for p, n in zip(ports, names))
            tail = "<TR>" + cells + "</TR>"
        return f"<<TABLE BORDER=\"0\" CELLBORDER=\"1\" CELLSPACING=\"0\">{head}{tail}</TABLE>>"

    def ports(self, node: OpNode) -> list[int]:
        """Output ports drawn as cells: for multi-output operators (not folded arrays)."""
        if len(node.outputs) <= 1 or OPS[node.op].fan_out or \
                (self.collapse and node.array_outputs):
            return []
        return list(range(len(node.outputs)))

    def node_line(self, node: OpNode) -> str:
        h = self.heat.get(node.name)
        color = _shade(h.fraction) if h is not None else FAMILY_COLORS[OPS[node.op].family]
        style = "rounded,filled" + (",dashed" if node.implicit else "")
        return (f"{_quote(node.name)} [label={self.node_label(node)}, fillcolor=\"{color}\", "
                f"style=\"{style}\"];")

    # ------------------------------------------------------------ edges
    def edge_lines(self) -> list[str]:
        seen: dict[tuple, int] = {}
        order: list[tuple] = []
        info: dict[tuple, tuple] = {}
        for e in self.prog.edges:
            src, dst = self.visible(e.src), self.visible(e.dst)
            src_node = self.prog.nodes[src]
            port = e.port if e.port in self.ports(src_node) else None
            key = (src, port, dst, e.feedback)
            if key not in seen:
                seen[key] = 0
                order.append(key)
                info[key] = (e.src, e.port)
            seen[key] += 1
        lines = []
        for key in order:
            src, port, dst, feedback = key
            t = self.typed.types.get(info[key])
            label = ""
            if t is not None:
                label = (f"<<FONT COLOR=\"red3\">{_esc(fmt_shape(t.shape))}</FONT><BR/>"
                         f"<FONT COLOR=\"gray35\">{_esc(str(t.elem))}</FONT>")
                if seen[key] > 1:
                    label += f"<BR/><FONT COLOR=\"blue\">x{seen[key]}</FONT>"
                label += ">"
            tail = _quote(src) + (f":o{port}:s" if port is not None else "")
            attrs = [f"label={label}"] if label else []
            if feedback:
                attrs += ["style=dashed", "color=\"purple\"", "constraint=false"]
            lines.append(f"{tail} -> {_quote(dst)} [{', '.join(attrs)}];")
        return lines

    # ------------------------------------------------------------ clusters
    def write(self) -> str:
        title = self.title or self.prog.name
        out = [f"// generated by stepc dot from {self.prog.name}",
               f"digraph {_quote('stepc ' + self.prog.name)} {{",
               f"  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=12, labelloc=t, "
               f"label={_quote(title)}, newrank=true];",
               "  node [shape=plain, fontname=\"Helvetica\", fontsize=10];",
               "  edge [fontname=\"Helvetica\", fontsize=8, arrowsize=0.6];"]
        folded = self.folded_clusters() if self.collapse else {}
        tree: dict = {"children": {}, "nodes": []}
        for name, node in self.prog.nodes.items():
            if name in self.rep:
                continue
            cur = tree
            for c in node.cluster:
                cur = cur["children"].setdefault(c.key, {"cluster": c, "children": {},
                                                         "nodes": []})
            cur["nodes"].append(node)
        self._emit(tree, out, 1, folded)
        out.extend("  " + line for line in self.edge_lines())
        out.append("}")
        return "\n".join(out) + "\n"

    def _emit(self, t: dict, out: list[str], depth: int, folded: dict[str, int]) -> None:
        pad = "  " * depth
        for node in t["nodes"]:
            out.append(pad + self.node_line(node))
        for key, child in t["children"].items():
            c: Cluster = child["cluster"]
            label = c.label
            if key in folded and folded[key] > 1:
                var = c.label.split(" = ")[0]
                label = f"{var} in {folded[key]} iterations (x{folded[key]}, first shown)"
            style = "rounded,dashed" if c.kind == "loop" else "rounded"
            out.append(f"{pad}subgraph {_quote('cluster_' + key)} {{")
            out.append(f"{pad}  label={_quote(label)}; style=\"{style}\"; color=\"gray50\"; "
                       "fontsize=10;")
            self._emit(child, out, depth + 1, folded)
            out.append(f"{pad}}}")


def to_dot(typed: TypedProgram, collapse: bool = False,
           heat: Mapping[str, Heat] | None = None, title: str | None = None) -> str:
    """The DOT text of a checked program."""
    return DotWriter(typed, collapse, heat, title).write()


def analysis_heat(analysis) -> tuple[dict[str, Heat], list[str]]:
    """Shade by share of off-chip traffic and note on-chip bytes. Unbound symbols are taken
    as 1 for the shares; their names are returned so the caller can say so."""
    unbound = sorted({s for o in analysis.ops for s in o.off_chip.free_symbols},
                     key=lambda s: s.name)
    ones = {s: 1 for s in unbound}
    for o in analysis.ops:
        ones.update({s: 1 for s in o.on_chip.free_symbols})
    traffic = {o.node: float(sympy.sympify(o.off_chip).xreplace(ones)) for o in analysis.ops}
    total = sum(traffic.values()) or 1.0
    heat = {}
    for o in analysis.ops:
        notes = []
        if traffic[o.node]:
            notes.append(f"{100 * traffic[o.node] / total:.1f}% of traffic")
        if o.on_chip != 0:
            v = sympy.sympify(o.on_chip)
            notes.append(f"on-chip {int(v):,} B" if v.is_Integer else f"on-chip {v} B")
        heat[o.node] = Heat(traffic[o.node] / total, ", ".join(notes))
    return heat, [s.name for s in unbound]
