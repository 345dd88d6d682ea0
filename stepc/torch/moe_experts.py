"""The experts of a sparse MoE block, read by their layout rather than their class
(stepc/torch/moe_parts.py): where each expert's gate, up and down weights are, and
that every expert computes the SwiGLU the MoE programs compute, `down(silu(gate(x)) *
up(x))` without biases.

Three layouts, the ones transformers and hand-written blocks use:

- fused: `gate_up_proj [E, 2F, D]` (gate rows first) and `down_proj [E, D, F]`, or
  `[E, D, 2F]` / `[E, F, D]` when `is_transposed` (transformers' experts classes);
- stacked: DBRX's `mlp.w1`, `mlp.v1`, `mlp.w2`, each `[E*F, D]`, one `[F, D]` slice per
  expert passed to `mlp(x, w1, v1, w2)`;
- list: an `nn.ModuleList` of E expert modules of one class, whatever their weights are
  named (`gate_proj`/`up_proj`/`down_proj`, `w1`/`w3`/`w2`, ...).

A list member and DBRX's `mlp` are captured on two rows and their graph read for the
SwiGLU, each weight's role and orientation; what they compute instead is shown when it
differs. A fused class is checked by its transformers flags and activation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from stepc.torch.canon import canonicalise
from stepc.torch.capture import LoweringError, Node, capture
from stepc.torch.hf_moe import (
    SHARED_GATE,
    SHARED_NAMES,
    check_experts,
    expert_weights,
    fused_shape,
    where,
)
from stepc.torch.moe import MoeTensor, SharedExpert
from stepc.torch.moe_structure import STACKED

ROLES = ("up", "gate", "down")
SWIGLU = "down(silu(gate(x)) * up(x)), without biases"
_OPERATORS = {"mul": "*", "add": "+", "sub": "-", "div": "/", "matmul": "@", "mm": "@"}


class ExpertsDiffer(Exception):
    """What a block's experts are or compute, where it differs from a lowered layout."""


@dataclass
class ExpertLayout:
    """Where a block's experts are and how their weights read as up / gate `[E, D, F]`
    and down `[E, F, D]`."""

    path: str                 # the block's attribute holding the experts
    form: str                 # "fused", "stacked" or "list"
    E: int
    D: int
    F: int
    roles: dict[str, tuple[str, bool]]  # stacked, list: role -> (weight name, transposed)
    about: str                # one sentence for the program's header

    def modules(self, block: torch.nn.Module) -> list[torch.nn.Module]:
        """The modules whose first call is the first expert call."""
        experts = getattr(block, self.path)
        return list(experts) if self.form == "list" else [experts]

    def sources(self) -> dict[str, str]:
        """Where the program's up, gate and down tensors come from."""
        if self.form == "fused":
            return {"up": f"{self.path}.gate_up_proj, its up rows, as [E, D, F]",
                    "gate": f"{self.path}.gate_up_proj, its gate rows, as [E, D, F]",
                    "down": f"{self.path}.down_proj, as [E, F, D]"}
        shape = {"up": "[E, D, F]", "gate": "[E, D, F]", "down": "[E, F, D]"}
        where = f"{self.path}.mlp" if self.form == "stacked" else f"{self.path}[e]"
        return {r: f"{where}.{name}{', transposed' if t else ''}, as {shape[r]}"
                for r, (name, t) in self.roles.items()}

    def weights(self, block: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The block's up, gate `[E, D, F]` and down `[E, F, D]` expert weights."""
        experts = getattr(block, self.path)
        if self.form == "fused":
            return dict(zip(ROLES, expert_weights(experts)))
        out = {}
        for role, (name, transposed) in self.roles.items():
            if self.form == "stacked":
                w = getattr(experts.mlp, name).detach().view(self.E, -1, self.D)
            else:
                w = torch.stack([m.get_parameter(name).detach() for m in experts])
            out[role] = w.transpose(1, 2) if transposed else w
        return out

    def parameters(self) -> set[str]:
        """The block's state-dict keys these experts hold."""
        if self.form == "fused":
            return {f"{self.path}.gate_up_proj", f"{self.path}.down_proj"}
        if self.form == "stacked":
            return {f"{self.path}.mlp.{n}" for n in STACKED}
        return {f"{self.path}.{e}.{name}" for e in range(self.E)
                for name, _ in self.roles.values()}


def expert_layout(block: torch.nn.Module, path: str, form: str, hidden: int) -> ExpertLayout:
    """The layout of `block.<path>`; ExpertsDiffer says what differs from each form."""
    experts = getattr(block, path)
    if form == "fused":
        try:
            e, two_f, d = fused_shape(experts, path)
            check_experts(experts, path)
        except LoweringError as err:
            raise ExpertsDiffer(str(err)) from None
        return ExpertLayout(path, form, e, d, two_f // 2, {},
                            f"Experts: {where(experts, path)}, fused gate_up_proj split into "
                            "gate and up.")
    if form == "stacked":
        return _stacked(experts, path, hidden)
    if form == "list":
        return _listed(experts, path, hidden)
    held = ", ".join(f"{n} {list(t.shape)}" for n, t in list(experts.state_dict().items())[:6])
    raise ExpertsDiffer(f"{where(experts, path)}, holding {held or 'no weights'}, is none of "
                        "the expert layouts stepc lowers")


@dataclass
class SharedLayout:
    """A shared expert every token goes through (a child named as transformers names them,
    whatever its class), read as the SwiGLU its graph computes, and its optional sigmoid
    gate `shared_expert_gate` (a linear layer from D to 1)."""

    path: str
    F: int
    roles: dict[str, tuple[str, bool]]  # role -> (weight name in the expert, transposed)
    gated: bool
    about: str

    def spec(self) -> SharedExpert:
        sources = self.sources()
        weights = {r: MoeTensor(f"{self.path}_{r}", sources[r], sources[r]) for r in ROLES}
        gate = (MoeTensor(SHARED_GATE, sources[SHARED_GATE], sources[SHARED_GATE])
                if self.gated else None)
        return SharedExpert(self.F, weights, gate, self.about)

    def sources(self) -> dict[str, str]:
        shape = {"up": "[D, FS]", "gate": "[D, FS]", "down": "[FS, D]"}
        out = {r: f"{self.path}.{name}{', transposed' if t else ''}, as {shape[r]}"
               for r, (name, t) in self.roles.items()}
        if self.gated:
            out[SHARED_GATE] = f"{SHARED_GATE}.weight, transposed, as [D, 1]"
        return out

    def weights(self, block: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The program's shared-expert tensors, by source."""
        mlp, sources = getattr(block, self.path), self.sources()
        out = {sources[r]: mlp.get_parameter(name).detach().T if t
               else mlp.get_parameter(name).detach() for r, (name, t) in self.roles.items()}
        if self.gated:
            out[sources[SHARED_GATE]] = getattr(block, SHARED_GATE).weight.detach().T
        return out

    def parameters(self) -> set[str]:
        """The block's state-dict keys the shared expert and its gate hold."""
        return ({f"{self.path}.{name}" for name, _ in self.roles.values()}
                | ({f"{SHARED_GATE}.weight"} if self.gated else set()))


def shared_layout(block: torch.nn.Module, hidden: int) -> SharedLayout | None:
    """The block's shared expert, if it has one; ExpertsDiffer says what differs."""
    path = next((n for n in SHARED_NAMES if isinstance(getattr(block, n, None),
                                                       torch.nn.Module)), None)
    if path is None:
        return None
    mlp, at = getattr(block, path), where(getattr(block, path), path)
    shapes = {n: tuple(p.shape) for n, p in mlp.named_parameters()}
    if not shapes:
        raise ExpertsDiffer(f"{at}: a shared expert without weights")
    p = next(mlp.parameters())
    roles, expr = _swiglu(mlp, (torch.zeros(2, hidden, dtype=p.dtype, device=p.device),), path)
    extra = sorted(set(shapes) - {name for name, _ in roles.values()})
    if extra or any(name not in shapes for name, _ in roles.values()):
        raise ExpertsDiffer(f"{at}: its weights {', '.join(sorted(shapes))} are not those of "
                            f"the SwiGLU {expr} it computes")
    up, transposed = shapes[roles["up"][0]], roles["up"][1]
    f = up[0] if transposed else up[-1]
    _check_shapes(roles, shapes, hidden, f, at, expr)
    gate = getattr(block, SHARED_GATE, None)
    if gate is not None and not (isinstance(gate, torch.nn.Linear) and gate.bias is None
                                 and tuple(gate.weight.shape) == (1, hidden)):
        raise ExpertsDiffer(f"{where(gate, SHARED_GATE)}: expected a linear layer from "
                            f"{hidden} to 1 without bias (the shared expert's sigmoid gate)")
    about = (f"Shared expert: {at}, FS = {f}, computing {expr} for every token, tiled like "
             "the routed experts' tokens; its rows "
             + (f"scaled by sigmoid({SHARED_GATE}(x)) and " if gate is not None else "")
             + "added to the routed sum.")
    return SharedLayout(path, f, roles, gate is not None, about)


def _stacked(experts: torch.nn.Module, path: str, hidden: int) -> ExpertLayout:
    mlp, at = experts.mlp, where(experts, path)
    shapes = {tuple(getattr(mlp, n).shape) for n in STACKED}
    e = getattr(experts, "num_experts", None)
    if len(shapes) != 1 or not isinstance(e, int) or e < 1:
        raise ExpertsDiffer(f"{at}: expected mlp.w1, mlp.v1, mlp.w2 of one shape [E*F, D] "
                            "and the number of experts E as `num_experts`; found "
                            f"{sorted(shapes)}, num_experts={e!r}")
    rows, d = shapes.pop()
    if d != hidden or rows % e:
        raise ExpertsDiffer(f"{at}: mlp.w1 [{rows}, {d}] is not {e} experts' [F, {hidden}]")
    f = rows // e
    x = torch.zeros(2, d, dtype=mlp.w1.dtype, device=mlp.w1.device)
    slices = [getattr(mlp, n)[:f] for n in STACKED]
    roles, expr = _swiglu(mlp, (x, *slices), f"{path}.mlp")
    names = {f"input{i}": n for i, n in enumerate(STACKED, 1)}
    roles = {r: (names.get(leaf, leaf), t) for r, (leaf, t) in roles.items()}
    if {name for name, _ in roles.values()} != set(STACKED):
        raise ExpertsDiffer(f"{at}: its mlp computes {expr} from "
                            f"{', '.join(name for name, _ in roles.values())}, not from the "
                            "expert's slices of w1, v1, w2 it is passed")
    _check_shapes(roles, {n: (f, d) for n in STACKED}, d, f, at, expr)
    return ExpertLayout(path, "stacked", e, d, f, roles,
                        f"Experts: {at}, {e} experts stacked in {path}.mlp.w1 / v1 / w2 "
                        f"[E*F, D], each computing {expr}.")


def _listed(experts: torch.nn.ModuleList, path: str, hidden: int) -> ExpertLayout:
    first, at = experts[0], where(experts, path)
    shapes = {n: tuple(p.shape) for n, p in first.named_parameters()}
    for i, m in enumerate(experts):
        if {n: tuple(p.shape) for n, p in m.named_parameters()} != shapes:
            raise ExpertsDiffer(f"{at}: the parameters of expert {i} differ from expert 0's")
    p = next(first.parameters())
    x = torch.zeros(2, hidden, dtype=p.dtype, device=p.device)
    roles, expr = _swiglu(first, (x,), f"{path}[0]")
    held = [name for name, _ in roles.values() if name not in shapes]
    if held:
        raise ExpertsDiffer(f"{at}: {', '.join(held)} of the SwiGLU {expr} each expert "
                            "computes are not parameters of the expert")
    extra = sorted(set(shapes) - {name for name, _ in roles.values()})
    if extra:
        raise ExpertsDiffer(f"{at}: expert weights {', '.join(extra)} are not part of the "
                            f"SwiGLU {expr} each expert computes")
    up, transposed = shapes[roles["up"][0]], roles["up"][1]
    f = up[0] if transposed else up[-1]
    _check_shapes(roles, shapes, hidden, f, at, expr)
    return ExpertLayout(path, "list", len(experts), hidden, f, roles,
                        f"Experts: {at}, a ModuleList of {len(experts)} "
                        f"{type(first).__name__}, each computing {expr}.")


def _check_shapes(roles: dict[str, tuple[str, bool]], shapes: dict[str, tuple], d: int,
                  f: int, at: str, expr: str) -> None:
    """Each role's weight, oriented, is up / gate [D, F] and down [F, D]."""
    want = {"up": (d, f), "gate": (d, f), "down": (f, d)}
    got = {r: shapes[name][::-1] if t else shapes[name] for r, (name, t) in roles.items()}
    if got != want:
        raise ExpertsDiffer(f"{at}: the weights of {expr} read as up {list(got['up'])}, gate "
                            f"{list(got['gate'])}, down {list(got['down'])}; one SwiGLU from "
                            f"D = {d} takes [D, F], [D, F], [F, D]")


def _swiglu(expert: torch.nn.Module, example: tuple, path: str
            ) -> tuple[dict[str, tuple[str, bool]], str]:
    """role -> (weight, transposed) of the SwiGLU `expert` computes on `example` (its
    first input the tokens), and that computation as text. A weight is named by its
    parameter name, or `inputN` for the N-th forward argument."""
    try:
        nodes = canonicalise(capture(expert, example))
    except LoweringError as e:
        raise ExpertsDiffer(f"module `{path}` ({type(expert).__name__}) cannot be captured "
                            f"on [2, D] tokens: {e}") from None
    inputs = [n for n in nodes if n.op == "input"]
    names = {n.name: f"input{i}" for i, n in enumerate(inputs)}
    out = next(n for n in nodes if n.op == "output")
    if not inputs or len(out.args) != 1:
        raise ExpertsDiffer(f"{where(expert, path)} returns {len(out.args)} values"
                            + ("" if inputs else " and does not read its tokens"))
    expr = _text(out.args[0], inputs[0])
    roles = _match(out.args[0], inputs[0])
    if roles is None:
        raise ExpertsDiffer(f"{where(expert, path)} computes {expr}; stepc lowers SwiGLU "
                            f"experts, {SWIGLU}")
    return ({r: (names.get(n.name, n.target), t) for r, (n, t) in roles.items()}, expr)


def _projection(n) -> tuple[Node, Node, bool] | None:
    """(tokens, weight leaf, transposed) of `x W` read from a linear or matmul without
    bias (a linear's weight is [out, in]: transposed)."""
    if not isinstance(n, Node) or n.op not in ("linear", "matmul", "mm") or len(n.args) < 2 \
            or not all(isinstance(a, Node) for a in n.args[:2]):
        return None
    x, w = n.args[:2]
    if n.op == "linear":
        bias = n.args[2] if len(n.args) > 2 else None
        return (x, w, True) if bias is None and _leaf(w) else None
    if w.op in ("transpose", "numpy_T") and _leaf(w.args[0]):
        return x, w.args[0], True
    return (x, w, False) if _leaf(w) else None


def _leaf(n) -> bool:
    return isinstance(n, Node) and n.op in ("param", "input")


def _match(y, x: Node) -> dict[str, tuple[Node, bool]] | None:
    down = _projection(y)
    if down is None or down[0].op != "mul":
        return None
    a, b = down[0].args[:2]
    for act, other in ((a, b), (b, a)):
        if isinstance(act, Node) and act.op == "silu":
            gate, up = _projection(act.args[0]), _projection(other)
            if gate and up and gate[0] is x and up[0] is x \
                    and len({gate[1].name, up[1].name, down[1].name}) == 3:
                return {"up": up[1:], "gate": gate[1:], "down": down[1:]}
    return None


def _text(n, x: Node, depth: int = 0, operand: bool = False) -> str:
    """A node's computation as a short formula (weights by name, the tokens as x); an
    `operand` of a binary operator is parenthesised when it is one too."""
    if not isinstance(n, Node):
        return repr(n)
    if n is x:
        return "x"
    if n.op in ("param", "input"):
        return n.target.removesuffix(".weight")
    if depth > 6:
        return "..."
    binary = n.op in _OPERATORS and len(n.args) == 2
    args = [_text(a, x, depth + 1, binary) for a in n.args if isinstance(a, Node)]
    if n.op == "linear":
        text = f"{args[1]}({args[0]})"
        return text if len(args) < 3 else f"({text} + bias)" if operand else f"{text} + bias"
    if n.op in ("transpose", "numpy_T"):
        return f"{args[0]}.T"
    if binary and len(args) == 2:
        text = f"{args[0]} {_OPERATORS[n.op]} {args[1]}"
        return f"({text})" if operand else text
    return f"{n.op}({', '.join(args)})"
