"""Decoder layers of Hugging Face transformers (`LlamaDecoderLayer`, `Qwen3MoeDecoderLayer`,
`MixtralDecoderLayer`, ...) in decode, and stacks of them, lowered as one program.

A layer is composed of the lowerings of its parts, each emitted as a fragment
(stepc/torch/fragment.py) with its names prefixed by layer and part:

    input_layernorm -> self_attn -> + residual -> post_attention_layernorm -> mlp -> + residual

The norms and a dense MLP are lowered node by node (stepc/torch/dense.py), the attention by
the decode-attention family (its KV lengths the external stream `kv_lens`, shared by every
layer: the same requests), a sparse MoE by the MoE family (its routing the external stream
`routing`, in a stack `routing_0`, `routing_1`, ... one per layer). As in the bundled
decoder programs (programs/lib/decoder.step), the parts exchange activations through
off-chip tensors where a part must finish before the next reads (the attention stores its
rows by request, in any order; a residual is read again after the part it bypasses): each
such load waits for the one-element barrier stream of the previous stage.

A layer's schedule is a pair (attention tiling, MoE tiling), offered as the bundled decoder
programs offer them: `static` (interleaved attention, static MoE tiles), `dynamic`
(dynamic attention, dynamic MoE tiles), `timemux` (dynamic attention, time-multiplexed MoE
regions). Params go to one part by prefix: `attn_R`, `moe_TILE_N`, `mlp_TB`, `norm_TB`.

The forward arguments are the attention's: `(hidden_states [B, 1, D], position_embeddings,
attention_mask, cache)`; the layer is called as transformers' model calls it, with them as
keywords.
"""

from __future__ import annotations

import copy
import textwrap
from dataclasses import dataclass

import numpy as np
import torch

from stepc.torch import families
from stepc.torch.capture import LoweringError
from stepc.torch.emit import StepWriter
from stepc.torch.fragment import Fragment

# decoder tiling -> (attention tiling, MoE tiling), as programs/decoder_*.step pair them
SCHEDULE_PAIRS = {"static": ("interleaved", "static"), "dynamic": ("dynamic", "dynamic"),
                   "timemux": ("dynamic", "timemux")}
PARTS = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")
# part -> the prefix of its params (shared by the layers) and of its other names
_ROLE = {"input_layernorm": "norm", "self_attn": "attn", "post_attention_layernorm": "norm",
         "mlp": "ffn"}
_NAME = {"input_layernorm": "norm1", "self_attn": "attn", "post_attention_layernorm": "norm2",
         "mlp": "ffn"}
_SHARED_PARAMS = {"B": "B", "D": "D", "HID": "D"}  # the same value in every part
_ALL_DONE = """
# One element when every element of `s` (a stream [n]) has been produced: the barrier a
# stage's loads wait for.
graph all_done(s) {
    return Accum(Promote(s), fn=signal_req_all_read, rank=1)        # [1]
}
"""


@dataclass
class LayerPart:
    """One part of one layer: its lowering (a whole program), as a fragment."""

    path: str                 # attribute of the layer: "self_attn", "mlp", ...
    program: object           # the part's TorchProgram (its values and traces)
    fragment: Fragment
    kind: str                 # "norm", "attention", "moe" or "mlp"


def ffn_kind(mlp: torch.nn.Module) -> str:
    fam = families.find(mlp)
    return "moe" if fam is not None and fam.kind == "moe" else "mlp"


def check_layer(layer: torch.nn.Module, where: str) -> None:
    """Refuse a layer whose parts are not the four this lowering composes."""
    for path in PARTS:
        if not isinstance(getattr(layer, path, None), torch.nn.Module):
            raise LoweringError(f"{where}: a decoder layer lowers from its submodules "
                                f"{', '.join(PARTS)}; it has no `{path}`")
    attn = families.match(layer.self_attn)
    if attn is None or attn.family.kind != "attention" or attn.override:
        why = f" ({attn.override})" if attn is not None and attn.override else ""
        raise LoweringError(f"{where}.self_attn ({type(layer.self_attn).__name__}): no "
                            f"registered decode-attention family lowers it{why}")
    for path in ("input_layernorm", "post_attention_layernorm"):
        norm = getattr(layer, path)
        if not type(norm).__name__.endswith("RMSNorm"):
            raise LoweringError(f"{where}.{path} ({type(norm).__name__}): stepc lowers "
                                "decoder layers with RMSNorm")
    extra = sorted(n for n, _ in layer.named_children() if n not in PARTS)
    if extra:
        raise LoweringError(f"{where}: submodule{'s' if len(extra) > 1 else ''} "
                            f"{', '.join(extra)} outside the four parts of a decoder layer "
                            f"({', '.join(PARTS)}) are not lowered")


def _part_key(path: str, sub: torch.nn.Module) -> tuple:
    """Parts with equal keys lower to the same program (the layers of one model)."""
    shapes = tuple((k, tuple(v.shape), v.dtype) for k, v in sub.state_dict().items())
    return (_ROLE[path], type(sub), shapes)


def lower_layers(layers: list, example: tuple, tiling: str, sched: dict, title: list[str],
                 per_layer_routing: bool):
    """The program of `layers` run one after another (see the module docstring): its writer
    (header, params, tensors) and statements, the tensors' sources, the numeric params used
    and each layer's parts."""
    from stepc.torch.hf_attention import lower_hf_attention
    from stepc.torch.hf_moe import lower_hf_moe

    if tiling not in SCHEDULE_PAIRS:
        raise LoweringError(f"unknown tiling `{tiling}` for a decoder layer (choose "
                            f"{', '.join(SCHEDULE_PAIRS)}: the pairs (attention, MoE) of the "
                            "bundled decoder programs)")
    att_tiling, moe_tiling = SCHEDULE_PAIRS[tiling]
    hs = example[0]
    if not isinstance(hs, torch.Tensor) or hs.dim() != 3 or hs.shape[1] != 1:
        raise LoweringError("a decoder layer in decode takes hidden_states [B, 1, hidden], "
                            f"found {list(getattr(hs, 'shape', []))}")
    b, d = hs.shape[0], hs.shape[2]
    by_role = _split_params(sched, layers)
    kinds = {ffn_kind(layer.mlp) for layer in layers}
    if tiling == "timemux" and "mlp" in kinds:
        raise LoweringError("tiling `timemux` time-multiplexes a MoE's experts; a layer with "
                            "a dense MLP takes static or dynamic")
    device = next(layers[0].parameters()).device  # the parts are captured where they are
    rows = torch.empty(b, d, dtype=hs.dtype, device=device)
    dt = {torch.float32: "f32", torch.bfloat16: "bf16"}.get(hs.dtype)
    if dt is None:
        raise LoweringError(f"dtype {hs.dtype} is not lowered (f32 or bf16)")
    cache: dict[tuple, object] = {}

    def lower(path: str, sub: torch.nn.Module):
        key = _part_key(path, sub)
        if key not in cache:
            role = _ROLE[path]
            if path == "self_attn":
                cache[key] = lower_hf_attention(sub, example, att_tiling, by_role["attn"])
            elif role == "ffn" and ffn_kind(sub) == "moe":
                cache[key] = lower_hf_moe(sub, (rows,), moe_tiling, by_role["moe"])
            elif role == "ffn":
                cache[key] = _captured(sub, rows, by_role["mlp"])
            else:
                cache[key] = _captured(sub, rows, {"TB": 1, **by_role["norm"]})
        return cache[key].on_module(sub)

    w = StepWriter()
    w.header += title
    w.param("B", b, "tokens, one decode request each")
    w.param("D", d, "hidden size")
    params: dict[str, tuple[str, str]] = {}
    body: list[tuple[str, str]] = []
    tensors: dict[str, str] = {"HIDDEN_STATES": "hidden_states [B, 1, D] as [B, D]"}
    decls = [("HIDDEN_STATES", f"{dt}[B, D] input", "the first layer's hidden_states")]
    all_parts = []
    bar = "start"
    body += [(_ALL_DONE.strip("\n"), ""), ("", ""), ("start = MetadataGen(ONE)", "")]
    decls.append(("ONE", "u64[1] input = ones", "the constant 1"))
    decls.append(("ROWS", "u64[B] input = arange", "row ids, the addresses of row stores"))
    for li, layer in enumerate(layers):
        p = f"l{li}_"
        parts = {}
        for path in PARTS:
            sub = getattr(layer, path)
            prog = lower(path, sub)
            role = _ROLE[path]
            kind = ("attention" if path == "self_attn" else
                    ffn_kind(sub) if role == "ffn" else "norm")
            prefix = kind if role == "ffn" else role  # of its params: attn_R, moe_TILE_N
            shared = {k: f"{prefix}_{k}" for k in _declared_params(prog.text)}
            shared.update({k: v for k, v in _SHARED_PARAMS.items() if k in shared})
            frag = Fragment.from_program(prog.text, f"{p}{_NAME[path]}_", shared)
            for name, value, comment in frag.params:
                if name in params and params[name][0] != value:
                    raise LoweringError(f"layer {li}: param {name} = {value}, where layer 0 "
                                        f"has {params[name][0]} (the layers differ)")
                params.setdefault(name, (value, comment))
            parts[path] = LayerPart(path, prog, frag, kind)
        inp = "HIDDEN_STATES" if li == 0 else f"l{li - 1}_OUT"
        out = "Y" if li == len(layers) - 1 else f"{p}OUT"
        body += [("", ""), ("", f"Layer {li}: {type(layer).__name__}")]
        body += _layer_body(p, li, parts, inp, out, bar, dt, per_layer_routing)
        for part in parts.values():
            for name, decl, comment in part.fragment.tensors:
                decls.append((name, decl, comment))
                src = part.program.tensors.get(_original(part.fragment, name), "")
                tensors[name] = f"layers.{li}.{part.path}: {src}"
        decls.append((f"{p}H1", f"{dt}[B, D] scratch", f"layer {li}'s attention output plus "
                      "its input (the MLP's residual)"))
        if out != "Y":
            decls.append((out, f"{dt}[B, D] scratch", f"layer {li}'s output"))
        bar = f"{p}done"
        all_parts.append(parts)
    body += [("", ""), (f"Sink({bar})", "")]
    decls.append(("Y", f"{dt}[B, D] output", "the last layer's output [B, 1, D] as [B, D]"))
    tensors["Y"] = "output"
    for name, (value, comment) in params.items():
        if name not in ("B", "D"):
            w.param(name, value, comment)
    width = max(len(d) for _, d, _ in decls)
    for name, decl, comment in decls:
        w.tensor(name, decl.ljust(width) if "=" not in decl else decl, comment)
    used = {k: v for k, (v, _) in params.items() if v.isdigit()}
    return w, body, tensors, used, all_parts


# node-by-node lowerings of norms and dense MLPs, by what their program depends on: a
# model's layers, and models of one config, capture each kind of part once per process
_CAPTURED: dict[tuple, object] = {}


def _captured(sub: torch.nn.Module, rows: torch.Tensor, sched: dict):
    """`from_torch(sub, (rows,), sched)`, captured once per class, settings (its repr:
    eps, activation), weight shapes, input shape and schedule."""
    from stepc.torch.lowering import from_torch
    key = (type(sub), repr(sub), tuple((k, tuple(v.shape), v.dtype)
                                       for k, v in sub.state_dict().items()),
           tuple(rows.shape), rows.dtype, tuple(sorted(sched.items())))
    if key not in _CAPTURED:
        # a part: the whole layer is verified
        _CAPTURED[key] = from_torch(sub, (rows,), schedule=sched, verify=False)
    return _CAPTURED[key].on_module(sub)


def schedule_doc(tiling: str, moe: bool) -> str:
    """`dynamic tiling: dynamic attention, dynamic MoE` for a header."""
    att, moe_tiling = SCHEDULE_PAIRS.get(tiling, ("?", "?"))
    return f"{tiling} tiling: {att} attention" + (f", {moe_tiling} MoE" if moe else "")


def _declared_params(text: str) -> list[str]:
    return [ln.split()[1] for ln in text.split("\n") if ln.startswith("param ")]


def _original(frag: Fragment, renamed: str) -> str:
    return next((k for k, v in frag.names.items() if v == renamed), renamed)


def _split_params(sched: dict, layers: list) -> dict[str, dict]:
    """The schedule's params by part: `attn_R` -> the attention's R, ..."""
    out: dict[str, dict] = {"attn": {}, "moe": {}, "mlp": {}, "norm": {}}
    for key, value in sched.items():
        role, _, name = key.partition("_")
        if role not in out or not name:
            raise LoweringError(f"schedule setting `{key}`: a decoder layer's settings name "
                                "their part: attn_R, attn_TILE_N, moe_TILE_N, moe_TILE_F, "
                                "mlp_TB, norm_TB, ...")
        out[role][name] = value
    kinds = {ffn_kind(layer.mlp) for layer in layers}
    for role in ("moe", "mlp"):
        if out[role] and role not in kinds:
            names = ", ".join(f"{role}_{k}" for k in out[role])
            what = "sparse MoE" if role == "moe" else "dense MLP"
            raise LoweringError(f"schedule settings {names}: the layers have no {what}")
    return out


def _collect_acks(att: Fragment) -> None:
    """The attention's per-region output acknowledgements (`ack, ... = hf_region(...)` then
    `Sink(ack)` in its region loop) kept as `ack[r]`, for the barrier after it."""
    ack, r = att.names["ack"], att.names["r"]
    call = next((i for i, (code, _) in enumerate(att.body)
                 if code.lstrip().startswith(f"{ack}, ")), None)
    sink = next((i for i, (code, _) in enumerate(att.body)
                 if call is not None and i > call and code.strip() == f"Sink({ack})"), None)
    if sink is None:
        raise LoweringError("composing a layer: the attention's region loop has no "
                            "`ack, ... = hf_region(...)` and `Sink(ack)`")
    code, comment = att.body[call]
    att.body[call] = (code.replace(f"{ack}, ", f"{ack}[{r}], ", 1), comment)
    del att.body[sink]


def _layer_body(p: str, li: int, parts: dict, inp: str, out: str, bar: str, dt: str,
                per_layer_routing: bool) -> list[tuple[str, str]]:
    """One layer's statements: its parts' fragments joined by the residual adds and the
    stage barriers."""
    n1, att, n2, ffn = (parts[k].fragment for k in PARTS)
    rows = "Flatten(LinearOffChipLoad({t}, ref={ref}, tile=[1, D]), min=0, max=2)"
    body = [(f"{p}x = " + rows.format(t=inp, ref=bar), f"[B] of [1, D], after {bar}")]
    # input RMSNorm -> the attention's rows
    n1.bind_input("HIDDEN_STATES", f"{p}x")
    normed = n1.take_output("Y")
    att.bind_input("X", normed)
    att.tensors = [(n, d.replace(" output", " scratch"), c) if n == att.names["O"] else
                   (n, d, c) for n, d, c in att.tensors]
    _collect_acks(att)
    ack = att.names["ack"]
    acks = f"{p}attn_acks"
    body += n1.body + [("", "")] + att.body + [
        ("", "the attention's output rows are stored by request: wait for all of them"),
        (f"{acks}, _ = EagerMerge({ack})", ""),
        (f"{p}att_done = all_done({acks})", ""),
        (f"{p}res1 = " + rows.format(t=inp, ref=f"{p}att_done"), "the residual"),
        (f"{p}att = " + rows.format(t=att.names["O"], ref=f"{p}att_done"), ""),
        (f"{p}h1 = Map({p}res1, {p}att, fn=add, dtype={dt})", "[B] of [1, D]"),
        (f"{p}h1_ack = RandomOffChipStore(MetadataGen(ROWS), {p}h1, {p}H1)",
         "row b at row b; acknowledged once written"),
        (f"{p}h1_done = all_done({p}h1_ack)", ""),
        (f"{p}h1_in = " + rows.format(t=f"{p}H1", ref=f"{p}h1_done"), ""),
        ("", ""),
    ]
    n2.bind_input("HIDDEN_STATES", f"{p}h1_in")
    normed = n2.take_output("Y")
    body += n2.body + [("", "")]
    if parts["mlp"].kind == "moe":
        ffn.bind_input("HIDDEN_STATES", f"Repeat({normed}, count=1)")
        if per_layer_routing:
            ffn.body = [(code.replace('external("routing"', f'external("routing_{li}"'), c)
                        for code, c in ffn.body]
        y = ffn.take_output("Y")
        body += ffn.body
    else:
        tb = ffn.names.get("TB", "TB")
        ffn.bind_input("X", f"Accum(Reshape({normed}, chunk={tb}), fn=retile_row, rank=1)")
        tiles = ffn.take_output("Y")
        body += ffn.body + [(f"{p}ffn_rows = FlatMap({tiles}, fn=retile_streamify)",
                             "[B] of [1, D]")]
        y = f"{p}ffn_rows"
    body += [
        ("", ""),
        (f"{p}res2 = " + rows.format(t=f"{p}H1", ref=f"{p}h1_done"), "the residual"),
        (f"{p}out = Map({p}res2, {y}, fn=add, dtype={dt})", "[B] of [1, D]"),
    ]
    if out == "Y":
        body += [(f"LinearOffChipStore({p}out, Y)", ""), (f"{p}done = all_done({p}out)", "")]
    else:
        body += [(f"{p}out_ack = RandomOffChipStore(MetadataGen(ROWS), {p}out, {out})", ""),
                 (f"{p}done = all_done({p}out_ack)", "the next layer starts")]
    return body


class DecoderIO:
    """Values, traces and seeded inputs of a decoder program: one forward of the module,
    each part's values taken as the part is called (before the attention appends to the
    cache)."""

    def __init__(self, parts: list[dict], layers_of, per_layer_routing: bool):
        self.parts, self.layers_of = parts, layers_of
        self.per_layer_routing = per_layer_routing

    def run(self, module, args: tuple) -> tuple[dict, dict]:
        if len(args) != 4:
            raise LoweringError("a decoder layer takes (hidden_states, position_embeddings, "
                                f"attention_mask, cache), given {len(args)} arguments")
        hs, pe, mask, cache = args
        values = {"HIDDEN_STATES": _np(hs).reshape(hs.shape[0], -1)}
        traces: dict[str, np.ndarray] = {}
        hooks = []
        for li, (layer, parts) in enumerate(zip(self.layers_of(module), self.parts)):
            for path, part in parts.items():
                hooks.append(getattr(layer, path).register_forward_pre_hook(
                    self._take(li, part, values, traces), with_kwargs=True))
        try:
            with torch.no_grad():
                module(hs, attention_mask=mask, cache=copy.deepcopy(cache),
                       position_embeddings=pe)
        finally:
            for h in hooks:
                h.remove()
        return values, traces

    def _take(self, li: int, part: LayerPart, values: dict, traces: dict):
        def hook(sub, args, kwargs):
            prog = part.program.on_module(sub)
            if part.kind == "attention":
                inputs = (kwargs.get("hidden_states", args[0] if args else None),
                          kwargs.get("position_embeddings"), kwargs.get("attention_mask"),
                          kwargs.get("cache"))
            else:
                x = args[0] if args else kwargs["hidden_states"]
                inputs = (x.reshape(-1, x.shape[-1]),)
            keep = {n for n, _, _ in part.fragment.tensors}
            for name, arr in prog.values(*inputs).items():
                renamed = part.fragment.names.get(name)
                if renamed in keep:
                    values[renamed] = _np(arr) if isinstance(arr, torch.Tensor) else arr
            for name, arr in prog.traces(*inputs).items():
                if name == "routing" and self.per_layer_routing:
                    name = f"routing_{li}"
                traces[name] = arr
        return hook

    def values(self, module, inputs: tuple) -> dict[str, np.ndarray]:
        return self._once(module, inputs)[0]

    def expected(self, module, inputs: tuple) -> dict[str, np.ndarray]:
        """The output Y: the module's forward (on a copy of the cache), [B, 1, D] as [B, D]."""
        hs, pe, mask, cache = inputs
        with torch.no_grad():
            out = module(hs, attention_mask=mask, cache=copy.deepcopy(cache),
                         position_embeddings=pe)
        out = out[0] if isinstance(out, tuple) else out
        return {"Y": _np(out).reshape(hs.shape[0], -1)}

    def traces(self, module, inputs: tuple) -> dict[str, np.ndarray]:
        return self._once(module, inputs)[1]

    def _once(self, module, inputs: tuple) -> tuple[dict, dict]:
        """`run`, once for the values and the traces of the same module and inputs."""
        last = getattr(self, "_last", None)
        if last is None or last[0] is not module or len(last[1]) != len(inputs) or \
                any(a is not b for a, b in zip(last[1], inputs)):
            self._last = (module, tuple(inputs), self.run(module, inputs))
        return self._last[2]

    def seeded_inputs(self, module, example: tuple, seed: int) -> tuple:
        """The attention's seeded inputs (hidden_states, (cos, sin), an additive mask, a
        DynamicCache holding every layer's past)."""
        last = self.layers_of(module)[-1]
        att = self.parts[-1]["self_attn"].program
        return att.io.seeded_inputs(last.self_attn, example, seed)


def _np(t) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy() if isinstance(t, torch.Tensor) else t


def write_statements(w: StepWriter, body: list[tuple[str, str]]) -> None:
    """Write `body` (statements, and graphs as multi-line code) into `w`."""
    for code, comment in body:
        if "\n" in code:
            for line in code.split("\n"):
                c, _, m = line.partition(" #")
                w.stmt(c.rstrip(), m.strip()) if c.strip() else w.blank(
                    m.strip().lstrip("# ") if m else "")
        elif code:
            w.stmt(code, comment)
        else:
            w.blank(comment)


def compose(layers: list, example: tuple, tiling: str | None, sched: dict, title: list[str],
            module: torch.nn.Module, layers_of, per_layer_routing: bool):
    """The TorchProgram of `layers` (the decoder layers of `module`, which `layers_of`
    returns)."""
    from stepc.torch.lowering import TorchProgram
    tiling = tiling or "static"
    w, body, tensors, used, parts = lower_layers(layers, example, tiling, sched, title,
                                                 per_layer_routing)
    write_statements(w, body)
    io = DecoderIO(parts, layers_of, per_layer_routing)
    # the fragments are rendered programs already: formatting the whole again would
    # parse it twice more, the most of the lowering's time
    return TorchProgram(w.render(formatted=False), tensors, module,
                        {"tiling": tiling, **used}, io=io)


def lower_hf_decoder_layer(module: torch.nn.Module, example_inputs: tuple, tiling: str,
                           sched: dict):
    """The family lowering of one transformers decoder layer (see the module docstring)."""
    from stepc.torch.hf_attention_program import site
    where = site(module)
    check_layer(module, type(module).__name__)
    kind = "sparse MoE" if ffn_kind(module.mlp) == "moe" else "dense SwiGLU MLP"
    how = schedule_doc(tiling or "static", kind == "sparse MoE")
    title = [*textwrap.wrap(f"{where}, layer {module.self_attn.layer_idx}, lowered by `stepc "
                            f"from-torch` ({how}).", 86), "",
             *textwrap.wrap(f"A decoder layer in decode: input RMSNorm, decode attention "
                            f"({type(module.self_attn).__name__}), residual add, "
                            f"post-attention RMSNorm, {kind} ({type(module.mlp).__name__}), "
                            "residual add; one new token per request.", 86)]
    return compose([module], tuple(example_inputs), tiling, sched, title, module,
                   lambda m: [m], per_layer_routing=False)
