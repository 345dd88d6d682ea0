"""Decoder layers of Hugging Face transformers (`LlamaDecoderLayer`, `Qwen3MoeDecoderLayer`,
`MixtralDecoderLayer`, ...) in decode, and stacks of them, lowered as one program.

A layer is composed of the lowerings of its parts, each emitted as a fragment
(stepc/torch/fragment.py) with its names prefixed by layer and part, in the order its own
forward runs them (stepc/torch/hf_decoder_structure.py reads it): two residual blocks,

    pre-norms -> self_attn -> post-norms -> + residual
    -> pre-norms -> mlp -> post-norms -> + residual

(Llama: one pre-norm each; Gemma2: a pre- and a post-norm each). The norms and a dense MLP
are lowered node by node (stepc/torch/dense.py), the attention by the decode-attention
family (its KV lengths the external stream `kv_lens`, shared by every layer: the same
requests), a sparse MoE by its MoE family (its routing the external stream `routing`, in
a stack `routing_0`, `routing_1`, ... one per layer). As in the bundled decoder programs
(programs/lib/decoder.step), the parts exchange activations through off-chip tensors
where a part must finish before the next reads (the attention stores its rows by request,
in any order; a residual is read again after the part it bypasses): each such load waits
for the one-element barrier stream of the previous stage.

A layer's schedule is a pair (attention tiling, MoE tiling), offered as the bundled decoder
programs offer them: `static` (interleaved attention, static MoE tiles), `dynamic`
(dynamic attention, dynamic MoE tiles), `timemux` (dynamic attention, time-multiplexed MoE
regions). Params go to one part by prefix: `attn_R`, `moe_TILE_N`, `mlp_TB`, `norm_TB`.

The forward arguments are the attention's: `(hidden_states [B, 1, D], position_embeddings,
attention_mask, cache)`; the layer is called as transformers' model calls it, with them as
keywords. `hidden_states [B, S, D]` with S > 1 is a prefill (stepc.torch.hf_prefill): the
norms, residuals and MLP run over the B S rows, the attention over B requests of S rows.
"""

from __future__ import annotations

import textwrap

import torch

from stepc.torch import families
from stepc.torch.capture import LoweringError
from stepc.torch.emit import StepWriter
from stepc.torch.fragment import Fragment
from stepc.torch.hf_decoder_io import DecoderIO, LayerPart
from stepc.torch.hf_decoder_structure import LayerRefused, LayerStructure, read_structure

# decoder tiling -> (attention tiling, MoE tiling), as programs/decoder_*.step pair them
SCHEDULE_PAIRS = {"static": ("interleaved", "static"), "dynamic": ("dynamic", "dynamic"),
                   "timemux": ("dynamic", "timemux")}
_SHARED_PARAMS = {"B": "B", "D": "D", "HID": "D"}  # the same value in every part
_ALL_DONE = """
# One element when every element of `s` (a stream [n]) has been produced: the barrier a
# stage's loads wait for.
graph all_done(s) {
    return Accum(Promote(s), fn=signal_req_all_read, rank=1)        # [1]
}
"""
_ROWS = "Flatten(LinearOffChipLoad({t}, ref={ref}, tile=[1, D]), min=0, max=2)"


def _part_names(structure: LayerStructure) -> dict[str, str]:
    """Each part's name in the program: norm1, norm2, ... in order, attn, ffn."""
    names, n = {}, 0
    for path, kind in structure.parts():
        if kind == "norm":
            n += 1
            names[path] = f"norm{n}"
        else:
            names[path] = "attn" if kind == "attention" else "ffn"
    return names


def _part_key(kind: str, sub: torch.nn.Module) -> tuple:
    """Parts with equal keys lower to the same program (the layers of one model)."""
    shapes = tuple((k, tuple(v.shape), v.dtype) for k, v in sub.state_dict().items())
    return (kind, type(sub), shapes)


def lower_layers(layers: list, example: tuple, tiling: str, sched: dict,
                 per_layer_routing: bool):
    """The program of `layers` run one after another (see the module docstring): its writer
    (params, tensors) and statements, the tensors' sources, the numeric params used, each
    layer's parts and each layer's structure."""
    if tiling not in SCHEDULE_PAIRS:
        raise LoweringError(f"unknown tiling `{tiling}` for a decoder layer (choose "
                            f"{', '.join(SCHEDULE_PAIRS)}: the pairs (attention, MoE) of the "
                            "bundled decoder programs)")
    from stepc.torch.hf_prefill import new_tokens

    hs = example[0]
    if not isinstance(hs, torch.Tensor) or hs.dim() != 3:
        raise LoweringError("a decoder layer takes hidden_states [B, S, hidden] (S = 1: "
                            f"decode), found {list(getattr(hs, 'shape', []))}")
    s = new_tokens(example)  # > 1: prefill, the attention's B requests of S rows each
    b, d = hs.shape[0] * s, hs.shape[2]
    dt = {torch.float32: "f32", torch.bfloat16: "bf16"}.get(hs.dtype)
    if dt is None:
        raise LoweringError(f"dtype {hs.dtype} is not lowered (f32 or bf16)")
    where = (lambda i: f"layers.{i}") if len(layers) > 1 else (lambda i: "")
    structures = [read_structure(layer, where(i), d, hs.dtype) for i, layer in enumerate(layers)]
    kinds = {st.ffn_kind for st in structures}
    by_role = _split_params(sched, kinds)
    if tiling == "timemux" and "mlp" in kinds:
        raise LoweringError("tiling `timemux` time-multiplexes a MoE's experts; a layer with "
                            "a dense MLP takes static or dynamic")
    device = next(layers[0].parameters()).device  # the parts are captured where they are
    lower = _PartLowering(example, torch.empty(b, d, dtype=hs.dtype, device=device),
                          SCHEDULE_PAIRS[tiling], by_role)

    w = StepWriter()
    w.param("B", b, "tokens, one decode request each" if s == 1 else
            f"tokens, S = {s} new ones of each request")
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
    for li, (layer, st) in enumerate(zip(layers, structures)):
        p = f"l{li}_"
        parts = {}
        names = _part_names(st)
        for path, kind in st.parts():
            sub = getattr(layer, path)
            try:
                prog = lower(kind, sub)
            except LayerRefused:
                raise
            except LoweringError as e:
                raise LayerRefused(f"{type(layer).__name__}.{path} ({type(sub).__name__}, "
                                   f"the layer's {kind}): no lowering covers it: {e}") from None
            prefix = "norm" if kind == "norm" else "attn" if kind == "attention" else kind
            shared = {k: f"{prefix}_{k}" for k in _declared_params(prog.text)}
            shared.update({k: v for k, v in _SHARED_PARAMS.items() if k in shared
                           and not (k == "B" and s > 1 and kind == "attention")})
            frag = Fragment.from_program(prog.text, f"{p}{names[path]}_", shared)
            for name, value, comment in frag.params:
                if name in params and params[name][0] != value:
                    raise LoweringError(f"layer {li}: param {name} = {value}, where layer 0 "
                                        f"has {params[name][0]} (the layers differ)")
                params.setdefault(name, (value, comment))
            parts[path] = LayerPart(path, prog, frag, kind)
        inp = "HIDDEN_STATES" if li == 0 else f"l{li - 1}_OUT"
        out = "Y" if li == len(layers) - 1 else f"{p}OUT"
        body += [("", ""), ("", f"Layer {li}: {type(layer).__name__}")]
        body += _layer_body(p, li, st, parts, inp, out, bar, dt, per_layer_routing)
        for part in parts.values():
            for name, decl, comment in part.fragment.tensors:
                decls.append((name, decl, comment))
                src = part.program.tensors.get(_original(part.fragment, name), "")
                tensors[name] = f"layers.{li}.{part.path}: {src}"
        decls.append((f"{p}H1", f"{dt}[B, D] scratch", f"layer {li}'s attention block output "
                      "(the MLP block's input and residual)"))
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
    return w, body, tensors, used, all_parts, structures


class _PartLowering:
    """Lowers each part once per kind, class and weight shapes (the layers of a model share
    their parts' programs), bound to the part's own module."""

    def __init__(self, example: tuple, rows: torch.Tensor, tilings: tuple[str, str],
                 by_role: dict[str, dict]):
        self.example, self.rows, self.by_role = example, rows, by_role
        self.att_tiling, self.moe_tiling = tilings
        self.cache: dict[tuple, object] = {}

    def __call__(self, kind: str, sub: torch.nn.Module):
        key = _part_key(kind, sub)
        if key not in self.cache:
            self.cache[key] = self._lower(kind, sub)
        return self.cache[key].on_module(sub)

    def _lower(self, kind: str, sub: torch.nn.Module):
        if kind == "attention":
            return families.find(sub).lowering()(sub, self.example, self.att_tiling,
                                                  self.by_role["attn"])
        if kind == "moe":
            fam = families.find(sub) or families.STRUCTURAL_MOE
            return fam.lowering()(sub, (self.rows,), self.moe_tiling, self.by_role["moe"])
        sched = self.by_role[kind] if kind == "mlp" else {"TB": 1, **self.by_role["norm"]}
        return _captured(sub, self.rows, sched)


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


def _split_params(sched: dict, kinds: set[str]) -> dict[str, dict]:
    """The schedule's params by part: `attn_R` -> the attention's R, ..."""
    out: dict[str, dict] = {"attn": {}, "moe": {}, "mlp": {}, "norm": {}}
    for key, value in sched.items():
        role, _, name = key.partition("_")
        if role not in out or not name:
            raise LoweringError(f"schedule setting `{key}`: a decoder layer's settings name "
                                "their part: attn_R, attn_TILE_N, moe_TILE_N, moe_TILE_F, "
                                "mlp_TB, norm_TB, ...")
        out[role][name] = value
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


def _input_name(frag: Fragment) -> str:
    """The original name of a fragment's activation input: `HIDDEN_STATES`, or its one
    tensor declared `input` (`X` for a forward taking `x`)."""
    if "HIDDEN_STATES" in frag.names:
        return "HIDDEN_STATES"
    inputs = [_original(frag, n) for n, decl, _ in frag.tensors if " input" in decl]
    if len(inputs) != 1:
        raise LoweringError(f"composing a layer: expected one input tensor, found {inputs}")
    return inputs[0]


def _norms(parts: dict, paths: tuple[str, ...], stream: str) -> tuple[str, list]:
    """The statements of the norms `paths` applied in turn to `stream`, and the result."""
    body = []
    for path in paths:
        frag = parts[path].fragment
        frag.bind_input(_input_name(frag), stream)
        stream = frag.take_output("Y")
        body += frag.body
    return stream, body


def _layer_body(p: str, li: int, st: LayerStructure, parts: dict, inp: str, out: str,
                bar: str, dt: str, per_layer_routing: bool) -> list[tuple[str, str]]:
    """One layer's statements: its parts' fragments joined by the residual adds and the
    stage barriers."""
    rows = _ROWS
    body = [(f"{p}x = " + rows.format(t=inp, ref=bar), f"[B] of [1, D], after {bar}")]
    # the attention block: pre-norms -> the attention's rows
    normed, stmts = _norms(parts, st.attention.pre, f"{p}x")
    att = parts[st.attention.core].fragment
    tokens = att.names.get("S")  # prefill: each request's rows as one [S, D] tile
    att.bind_input("X", normed if tokens is None else
                   f"Accum(Reshape({normed}, chunk={tokens}), fn=retile_row, rank=1)")
    att.tensors = [(n, d.replace(" output", " scratch"), c) if n == att.names["O"] else
                   (n, d, c) for n, d, c in att.tensors]
    _collect_acks(att)
    ack = att.names["ack"]
    acks = f"{p}attn_acks"
    body += stmts + [("", "")] + att.body + [
        ("", "the attention's output rows are stored by request: wait for all of them"),
        (f"{acks}, _ = EagerMerge({ack})", ""),
        (f"{p}att_done = all_done({acks})", ""),
        (f"{p}res1 = " + rows.format(t=inp, ref=f"{p}att_done"), "the residual"),
        (f"{p}att = " + rows.format(t=att.names["O"], ref=f"{p}att_done"), ""),
    ]
    y, stmts = _norms(parts, st.attention.post, f"{p}att")
    body += stmts + [
        (f"{p}h1 = Map({p}res1, {y}, fn=add, dtype={dt})", "[B] of [1, D]"),
        (f"{p}h1_ack = RandomOffChipStore(MetadataGen(ROWS), {p}h1, {p}H1)",
         "row b at row b; acknowledged once written"),
        (f"{p}h1_done = all_done({p}h1_ack)", ""),
        (f"{p}h1_in = " + rows.format(t=f"{p}H1", ref=f"{p}h1_done"), ""),
        ("", ""),
    ]
    # the MLP block: pre-norms -> the MLP or MoE -> post-norms
    normed, stmts = _norms(parts, st.ffn.pre, f"{p}h1_in")
    body += stmts + [("", "")]
    ffn = parts[st.ffn.core].fragment
    if st.ffn_kind == "moe":
        ffn.bind_input("HIDDEN_STATES", f"Repeat({normed}, count=1)")
        if per_layer_routing:
            ffn.body = [(code.replace('external("routing"', f'external("routing_{li}"'), c)
                        for code, c in ffn.body]
        y = ffn.take_output("Y")
        body += ffn.body
    else:
        tb = ffn.names.get("TB", "TB")
        ffn.bind_input(_input_name(ffn),
                       f"Accum(Reshape({normed}, chunk={tb}), fn=retile_row, rank=1)")
        tiles = ffn.take_output("Y")
        body += ffn.body + [(f"{p}ffn_rows = FlatMap({tiles}, fn=retile_streamify)",
                             "[B] of [1, D]")]
        y = f"{p}ffn_rows"
    y, stmts = _norms(parts, st.ffn.post, y)
    body += stmts + [
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


def write_statements(w: StepWriter, body: list[tuple[str, str]]) -> None:
    """Write `body` (statements, and graphs as multi-line code) into `w`."""
    for code, comment in body:
        if "\n" in code:
            w.graph(code)
        elif code:
            w.stmt(code, comment)
        else:
            w.blank(comment)


def compose(layers: list, example: tuple, tiling: str | None, sched: dict, title,
            module: torch.nn.Module, layers_of, per_layer_routing: bool):
    """The TorchProgram of `layers` (the decoder layers of `module`, which `layers_of`
    returns); `title` is a function of the layers' structures giving the header."""
    from stepc.torch.lowering import TorchProgram
    tiling = tiling or "static"
    w, body, tensors, used, parts, structures = lower_layers(
        layers, example, tiling, sched, per_layer_routing)
    w.header += title(structures)
    write_statements(w, body)
    io = DecoderIO(parts, layers_of, per_layer_routing)
    # the fragments are rendered programs already: formatting the whole again would
    # parse it twice more, the most of the lowering's time
    return TorchProgram(w.render(formatted=False), tensors, module,
                        {"tiling": tiling, **used}, io=io)


_FFN_DOC = {"moe": "sparse MoE", "mlp": "dense MLP"}


def lower_hf_decoder_layer(module: torch.nn.Module, example_inputs: tuple, tiling: str,
                           sched: dict):
    """The family lowering of one transformers decoder layer (see the module docstring)."""
    from stepc.torch.hf_attention_program import site
    from stepc.torch.hf_prefill import new_tokens
    where = site(module)
    s = new_tokens(tuple(example_inputs))
    phase, tokens = ("decode", "one new token") if s == 1 else ("prefill", f"{s} new tokens")

    def title(structures: list[LayerStructure]) -> list[str]:
        st = structures[0]
        how = schedule_doc(tiling or "static", st.ffn_kind == "moe")
        att, ffn = (getattr(module, b.core) for b in (st.attention, st.ffn))
        return [*textwrap.wrap(f"{where}, layer {getattr(att, 'layer_idx', '?')}, lowered by "
                               f"`stepc from-torch` ({how}).", 86), "",
                *textwrap.wrap(f"A decoder layer in {phase}, {tokens} per request: "
                               f"{st.describe()}; the attention {type(att).__name__}, the "
                               f"{_FFN_DOC[st.ffn_kind]} {type(ffn).__name__}.", 86)]

    return compose([module], tuple(example_inputs), tiling, sched, title, module,
                   lambda m: [m], per_layer_routing=False)
