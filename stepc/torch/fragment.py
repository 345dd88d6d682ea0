"""A lowered block as a fragment of a larger program: the params, tensors and statements of
a program a family emitted, with its names prefixed so that several blocks (the parts of a
decoder layer, the layers of a model) share one program without colliding, its input
tensor's load replaced by a stream the larger program computes, and its output store
replaced by the stream it stored.

The fragment reads the program text `StepWriter.render` writes (`param` and `tensor` lines
at the left margin, then the statements), so every family's lowering composes unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from stepc.torch.capture import LoweringError

_TOKEN = re.compile(r'"[^"]*"|#.*|[A-Za-z_]\w*|\S')
_DECLARED = re.compile(r"^\s*(?:param|tensor|graph|stream)\s+(\w+)")
_TARGETS = re.compile(r"^\s*([^=(]+?)\s*=(?!=)")  # `a, b[i * G + g] = ...`
_TARGET = re.compile(r"(?:^|,)\s*(\w+)")  # each target's name, past its index
_LOOP = re.compile(r"^\s*for\s+(\w+)\s+in\b")


@dataclass
class Fragment:
    """A program's sections, renamed: params (name, value, comment), tensors (name,
    declaration, comment) and statements (code, comment), as StepWriter holds them."""

    params: list[tuple[str, str, str]] = field(default_factory=list)
    tensors: list[tuple[str, str, str]] = field(default_factory=list)
    body: list[tuple[str, str]] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # original name -> renamed

    @classmethod
    def from_program(cls, text: str, prefix: str, shared: dict[str, str] | None = None
                     ) -> Fragment:
        """The program `text` with every name it declares prefixed by `prefix`, except the
        params of `shared` (original name -> the name the larger program gives it)."""
        lines = text.split("\n")
        while lines and (lines[0].startswith("#") or not lines[0].strip()):
            lines.pop(0)  # the header: the larger program writes its own
        declared: set[str] = set()
        for line in lines:
            code = _code(line)
            for pattern in (_DECLARED, _LOOP):
                m = pattern.match(code)
                if m:
                    declared.add(m.group(1))
            m = _TARGETS.match(code)
            if m and not code.lstrip().startswith(("param", "tensor", "assume", "stream")):
                declared |= {t.group(1) for t in _TARGET.finditer(m.group(1))}
        declared -= {"", "_"}
        names = {n: f"{prefix}{n}" for n in declared}
        names.update(shared or {})
        frag = cls(names=names)
        for line in lines:
            code, comment = _split(line)
            if code.startswith("param "):
                name, _, value = code[len("param "):].partition("=")
                frag.params.append((names[name.strip()], _rename(value.strip(), names),
                                    comment))
            elif code.startswith("tensor "):
                name, _, decl = code[len("tensor "):].partition(":")
                shape, _, role = decl.strip().partition("] ")  # the role is not a name
                frag.tensors.append((names[name.strip()], f"{_rename(shape, names)}] {role}",
                                     comment))
            else:
                frag.body.append((_rename(code, names), comment))
        while frag.body and not frag.body[0][0] and not frag.body[0][1]:
            frag.body.pop(0)
        return frag

    def bind_input(self, tensor: str, stream: str) -> None:
        """Replace the one load of input tensor `tensor` (its original name) by `stream`,
        and drop the tensor."""
        name = self.names[tensor]
        load = re.compile(rf"^(\s*\w+\s*=\s*)LinearOffChipLoad\({name},.*$")
        hits = [i for i, (code, _) in enumerate(self.body) if load.match(code)]
        if len(hits) != 1:
            raise LoweringError(f"composing a layer: expected one load of `{tensor}`, "
                                f"found {len(hits)}")
        code, comment = self.body[hits[0]]
        self.body[hits[0]] = (load.sub(rf"\g<1>{stream}", code), comment)
        self.drop_tensor(tensor)

    def take_output(self, tensor: str) -> str:
        """Remove the one `LinearOffChipStore(s, tensor)` statement and the tensor; returns
        the stored stream `s`."""
        name = self.names[tensor]
        store = re.compile(rf"^\s*LinearOffChipStore\((\w+), {name}\)$")
        hits = [i for i, (code, _) in enumerate(self.body) if store.match(code)]
        if len(hits) != 1:
            raise LoweringError(f"composing a layer: expected one store to `{tensor}`, "
                                f"found {len(hits)}")
        stream = store.match(self.body.pop(hits[0])[0]).group(1)
        self.drop_tensor(tensor)
        return stream

    def drop_tensor(self, tensor: str) -> None:
        name = self.names[tensor]
        self.tensors = [t for t in self.tensors if t[0] != name]

    def replace(self, old: str, new: str) -> None:
        """Rewrite the statements whose code is exactly `old` (after renaming) to `new`
        (None deletes them)."""
        self.body = [(new, c) if code.strip() == old else (code, c)
                     for code, c in self.body if not (new is None and code.strip() == old)]


def _code(line: str) -> str:
    return _split(line)[0]


def _split(line: str) -> tuple[str, str]:
    """(code, comment) of a line, the comment without its `#`."""
    for tok in _TOKEN.finditer(line):
        if tok.group().startswith("#"):
            return line[:tok.start()].rstrip(), tok.group()[1:].strip()
    return line.rstrip(), ""


def _rename(code: str, names: dict[str, str]) -> str:
    """`code` with each declared name renamed, skipping strings, keyword names (`tile=`)
    and operator functions (`fn=mul`)."""
    out, last = [], 0
    toks = list(_TOKEN.finditer(code))
    for i, tok in enumerate(toks):
        word = tok.group()
        if word not in names:
            continue
        nxt = toks[i + 1].group() if i + 1 < len(toks) else ""
        nxt2 = toks[i + 2].group() if i + 2 < len(toks) else ""
        after_fn = i >= 2 and toks[i - 1].group() == "=" and toks[i - 2].group() == "fn"
        keyword = nxt == "=" and nxt2 != "=" and not _is_statement_target(toks, i)
        if after_fn or keyword:
            continue
        out.append(code[last:tok.start()])
        out.append(names[word])
        last = tok.end()
    out.append(code[last:])
    return "".join(out)


def _is_statement_target(toks, i: int) -> bool:
    """Whether token i is a target of an assignment statement (not a keyword argument):
    no open parenthesis before it."""
    depth = 0
    for tok in toks[:i]:
        depth += {"(": 1, ")": -1}.get(tok.group(), 0)
    return depth == 0
