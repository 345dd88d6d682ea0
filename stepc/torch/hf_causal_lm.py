"""Whole causal LMs of transformers (`LlamaForCausalLM`, `Qwen3ForCausalLM`,
`Qwen3MoeForCausalLM`, `MixtralForCausalLM`, ...) in decode over a KV cache, lowered as one
program (the family of kind "model", stepc/torch/families.py):

    input_ids -> embedding gather -> decoder layers -> final RMSNorm -> LM head -> logits

The forward is called as transformers' `generate` calls it for one decode step:
`model(input_ids [B, 1], attention_mask [B, P + 1], position_ids [B, 1], cache)`, the cache a
`DynamicCache` holding P past positions of every layer (the mask and the positions may be
None, as the model's forward allows).

- The embedding is a data-dependent gather of rows from HBM: the token ids are the program's
  input `INPUT_IDS` (u64 [B]), streamed by `MetadataGen` as the address stream of a
  `RandomOffChipLoad` of [1, D] tiles of the table `EMBED` [V, D] (tile number = row = token
  id), as the bundled programs read KV-cache tiles by address. The rows are stored by
  request to `HIDDEN_STATES`, which the first layer reads once they are all written.
- The decoder layers are stepc/torch/hf_decoder.py's stack, each with its own weights, KV
  cache and routing trace (`routing_0`, `routing_1`, ...); `kv_lens` is shared.
- The final RMSNorm runs on the last layer's output rows, node by node as the layers'
  norms; the LM head is the dense lowering of `lm_head` (its [V, D] weight read once per
  tile of `head_TB` rows, by default all B: once per step, in tiles of `head_TILE_F`
  vocabulary columns) and stores `LOGITS` [B, V]. With tied embeddings (`lm_head.weight`
  is the embedding's) it reads `EMBED`.
"""

from __future__ import annotations

import copy
import textwrap

import numpy as np
import torch

from stepc.torch import families
from stepc.torch.capture import InputRefused, LoweringError
from stepc.torch.fragment import Fragment
from stepc.torch.hf_decoder import (
    DecoderIO,
    lower_layers,
    schedule_doc,
    write_statements,
)
from stepc.torch.hf_decoder_structure import read_structure
from stepc.torch.hf_model import DTYPES

ARGUMENTS = "input_ids [B, 1], attention_mask [B, P + 1], position_ids [B, 1], cache"
_HEAD_PREFIX = "head_"   # the LM head's params: head_TB, head_TILE_F
_NORM_PREFIX = "norm_"   # the final norm shares the layers' norm params (norm_TB)
_SUBMODULES = (("model.embed_tokens", torch.nn.Embedding), ("model.layers", torch.nn.ModuleList),
               ("model.norm", torch.nn.Module), ("model.rotary_emb", torch.nn.Module),
               ("lm_head", torch.nn.Linear))


def _sub(module: torch.nn.Module, path: str):
    for name in path.split("."):
        module = getattr(module, name, None)
    return module


def check_causal_lm(module: torch.nn.Module) -> None:
    """Refuse a causal LM whose parts are not the ones this lowering composes."""
    where = type(module).__name__
    for path, kind in _SUBMODULES:
        sub = _sub(module, path)
        if not isinstance(sub, kind):
            raise LoweringError(f"{where}: a causal LM lowers from its submodules "
                                f"{', '.join(p for p, _ in _SUBMODULES)}; `{path}` is "
                                f"{type(sub).__name__ if sub is not None else 'missing'}")
    embed, head, norm = module.model.embed_tokens, module.lm_head, module.model.norm
    if embed.max_norm is not None:
        raise LoweringError(f"{where}.model.embed_tokens: an embedding with max_norm "
                            "renormalises the rows it reads; it is not lowered")
    if head.bias is not None:
        raise LoweringError(f"{where}.lm_head: an LM head with a bias is not lowered")
    if not type(norm).__name__.endswith("RMSNorm"):
        raise LoweringError(f"{where}.model.norm ({type(norm).__name__}): stepc lowers causal "
                            "LMs whose final norm is an RMSNorm")
    layers = module.model.layers
    used = getattr(module.config, "num_hidden_layers", len(layers))
    if used != len(layers):
        raise LoweringError(f"{where}: config.num_hidden_layers is {used} but the model holds "
                            f"{len(layers)} decoder layers")
    dtype = module.lm_head.weight.dtype
    for i, layer in enumerate(layers):  # refused naming what differs (LayerRefused)
        read_structure(layer, f"{where}.model.layers.{i}", module.config.hidden_size, dtype)


def model_classes() -> list[str]:
    return [c for fam in families.FAMILIES if fam.kind == "model" for c in fam.classes]


def whole_model_hint(obj) -> str:
    """For a whole transformers model (a class or an instance): what stepc lowers of whole
    models ("" for anything else)."""
    cls = obj if isinstance(obj, type) else type(obj)
    if not any(c.__name__ == "PreTrainedModel" for c in cls.__mro__):
        return ""
    return (f"{cls.__name__} is a whole model: stepc lowers the whole causal LMs "
            f"{', '.join(model_classes())} in decode (`--hf-config CONFIG.json --whole-model`, "
            "or the class with --hf-config and no --input), and the first N decoder layers of "
            "a model from its config (`--hf-config CONFIG.json --layers N`)")


def decode_args(module, example: tuple) -> tuple:
    """(input_ids, attention_mask, position_ids, cache, batch, past), checked."""
    def refuse(what: str) -> InputRefused:
        return InputRefused(f"{type(module).__name__}: {what}; a causal LM lowers for one "
                             f"decode step, called as generate calls it: ({ARGUMENTS}) with "
                             "a DynamicCache of P past positions per layer (from the command "
                             "line: --hf-config CONFIG.json --whole-model, or --layers N for "
                             "the decoder layers alone)")
    if len(example) != 4:
        raise refuse(f"given {len(example)} forward argument{'s' if len(example) != 1 else ''}")
    ids, mask, pos, cache = example
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[1] != 1 or \
            ids.is_floating_point():
        raise refuse(f"input_ids is {_shape(ids)}, expected integer token ids [B, 1]")
    layers = getattr(cache, "layers", None)
    if layers is None or len(layers) < len(module.model.layers) or \
            getattr(layers[0], "keys", None) is None:
        raise refuse("the cache holds no past keys and values for every layer")
    batch, past = ids.shape[0], int(layers[0].keys.shape[2])
    if mask is not None and (not isinstance(mask, torch.Tensor) or
                             tuple(mask.shape) != (batch, past + 1)):
        raise refuse(f"attention_mask is {_shape(mask)}, expected [{batch}, {past + 1}]")
    if pos is not None and (not isinstance(pos, torch.Tensor) or
                            tuple(pos.shape) not in ((batch, 1), (1, 1))):
        raise refuse(f"position_ids is {_shape(pos)}, expected [{batch}, 1]")
    return ids, mask, pos, cache, batch, past


def _shape(t) -> str:
    return str(list(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _layer_example(module, batch: int, past: int, cache) -> tuple:
    """The decoder layers' forward arguments, shapes only: hidden_states, (cos, sin), a
    4-D mask and the cache."""
    p = next(module.parameters())
    head_dim = module.model.layers[0].self_attn.head_dim
    with torch.device(p.device):
        hs = torch.empty(batch, 1, module.config.hidden_size, dtype=p.dtype)
        pe = (torch.empty(batch, 1, head_dim, dtype=p.dtype),) * 2
        mask = torch.empty(batch, 1, 1, past + 1, dtype=p.dtype)
    return hs, pe, mask, cache


def _head_part(sub, rows, prefix: str, param_prefix: str, sched: dict, shared: dict):
    """The node-by-node lowering of the final norm or the LM head, as a fragment of names
    prefixed by `prefix`, its params by `param_prefix` (B stays B)."""
    from stepc.torch.lowering import from_torch
    prog = from_torch(sub, (rows,), schedule=sched, verify=False)  # the model is verified
    params = [ln.split()[1] for ln in prog.text.split("\n") if ln.startswith("param ")]
    names = {k: f"{param_prefix}{k}" for k in params}
    names.update({"B": "B", **shared})
    return prog, Fragment.from_program(prog.text, prefix, names)


def _input_tensor(prog, sub) -> str:
    state = sub.state_dict()
    return next(n for n, src in prog.tensors.items() if src not in state and src != "output")


_EMBEDDING = [
    ("ids     = MetadataGen(INPUT_IDS)", "[B] of [1, 1]: the token ids"),
    ("emb     = RandomOffChipLoad(ids, EMBED, tile=[1, D])",
     "[B] of [1, D]: row `id` of the table"),
    ("emb_ack = RandomOffChipStore(MetadataGen(ROWS), emb, HIDDEN_STATES)",
     "request b's row at row b"),
    ("start   = all_done(emb_ack)", "the first layer reads them once all are written"),
]


def lower_hf_causal_lm(module: torch.nn.Module, example_inputs: tuple, tiling: str,
                       sched: dict):
    """The family lowering of a transformers causal LM in decode (see the module docstring).
    Settings: the decoder layers' (attn_R, moe_TILE_N, mlp_TB, norm_TB, ...) and the LM
    head's, head_TB and head_TILE_F."""
    from stepc.torch.lowering import TorchProgram
    check_causal_lm(module)
    _, _, _, cache, batch, past = decode_args(module, tuple(example_inputs))
    sched = dict(sched)
    head_sched = {k[len(_HEAD_PREFIX):]: sched.pop(k) for k in list(sched)
                  if k.startswith(_HEAD_PREFIX)}
    head_sched.setdefault("TB", batch)  # the vocabulary-sized weight read once per step
    norm_sched = {"TB": 1, **{k[len(_NORM_PREFIX):]: v for k, v in sched.items()
                              if k.startswith(_NORM_PREFIX)}}  # as the layers' norms
    layers = list(module.model.layers)
    tied = module.lm_head.weight is module.model.embed_tokens.weight
    example = _layer_example(module, batch, past, cache)
    w, body, tensors, used, parts, structures = lower_layers(
        layers, example, tiling, sched, per_layer_routing=True)
    w.header += _title(module, batch, past, tiling, tied,
                       any(st.ffn_kind == "moe" for st in structures))
    rows = torch.empty(batch, module.config.hidden_size, dtype=example[0].dtype,
                       device=example[0].device)
    norm_prog, norm = _head_part(module.model.norm, rows, "fnorm_", _NORM_PREFIX, norm_sched,
                                 {})
    head_prog, head = _head_part(module.lm_head, rows, _HEAD_PREFIX, _HEAD_PREFIX, head_sched,
                                 {"Y": "LOGITS", **({"weight": "EMBED"} if tied else {})})
    if tied:
        head.drop_tensor("weight")
    last = f"l{len(layers) - 1}_out"
    norm.bind_input(_input_tensor(norm_prog, module.model.norm), last)
    normed = norm.take_output("Y")
    head.bind_input(_input_tensor(head_prog, module.lm_head),
                    f"Accum(Reshape({normed}, chunk={head.names['TB']}), fn=retile_row, "
                    "rank=1)")
    _splice(body, "start = MetadataGen(ONE)", _EMBEDDING)
    _splice(body, f"LinearOffChipStore({last}, Y)",
            [("", ""), ("", "The final RMSNorm and the LM head")] + norm.body + head.body)
    used.update(_merge_params(w, (norm, head)))
    dt = next(k for k, v in DTYPES.items() if v == example[0].dtype)
    _declare(w, (norm, head), dt, module.config.vocab_size, tied)
    heads = [("model.norm", norm_prog, norm), ("lm_head", head_prog, head)]
    write_statements(w, body)
    io = CausalLMIO(parts, lambda m: list(m.model.layers), True, heads)
    return TorchProgram(w.render(formatted=False), _sources(tensors, heads), module,
                        {"tiling": tiling, **used}, io=io)


def _title(module, batch: int, past: int, tiling: str, tied: bool, moe: bool) -> list[str]:
    cfg, layers = module.config, module.model.layers
    return [*textwrap.wrap(
        f"{type(module).__name__} ({cfg.model_type}: {len(layers)} decoder layer"
        f"{'s' if len(layers) > 1 else ''} of {type(layers[0]).__name__}, hidden "
        f"{cfg.hidden_size}, vocabulary {cfg.vocab_size}{', tied embeddings' if tied else ''})"
        f", one decode step of {batch} requests over {past} cached positions, lowered by "
        f"`stepc from-torch` ({schedule_doc(tiling, moe)}).", 86), "",
        *textwrap.wrap("The token embedding gathered from HBM by id, the decoder layers, the "
                       "final RMSNorm and the LM head: LOGITS [B, V]. Token ids: INPUT_IDS "
                       "(u64 [B]). KV lengths: --trace kv_lens=LENS.npy (int [B], every "
                       "layer)." + (" Routing: --trace routing_L=IDS.npy ([B, K] expert ids) "
                                    "for layer L." if moe else ""), 86)]


def _merge_params(w, frags) -> dict[str, str]:
    """Declare the fragments' params the layers have not (refusing a different value);
    returns the numeric ones declared."""
    declared = {n: v for n, v, _ in w.params}
    used = {}
    for frag in frags:
        for name, value, comment in frag.params:
            if name in declared:
                if declared[name] != value:
                    raise LoweringError(f"param {name} = {value}, where the layers have "
                                        f"{declared[name]}")
                continue
            declared[name] = value
            w.param(name, value, comment)
            if value.isdigit():
                used[name] = value
    return used


def _declare(w, frags, dt: str, vocab: int, tied: bool) -> None:
    """The tensors: the token ids and the table first, the embedded rows as scratch in
    place of the stack's input, the fragments' in place of its output."""
    w.tensors = [(n, d.replace(" input", " scratch", 1), "the embedded tokens")
                 if n == "HIDDEN_STATES" else (n, d, c) for n, d, c in w.tensors if n != "Y"]
    w.tensors[:0] = [("INPUT_IDS", f"u64[B] input = random(seed=1, high={vocab})",
                      "input_ids [B, 1] as [B]: ids below the vocabulary"),
                     ("EMBED", f"{dt}[{vocab}, D] weight", "model.embed_tokens.weight" +
                      (" (also lm_head.weight: tied)" if tied else ""))]
    for frag in frags:
        w.tensors += frag.tensors
    width = max(len(d) for _, d, _ in w.tensors)
    w.tensors = [(n, d if "=" in d else d.ljust(width), c) for n, d, c in w.tensors]


def _sources(stack: dict[str, str], heads: list) -> dict[str, str]:
    """Program tensor -> the model's state-dict key, argument or role."""
    out = {"INPUT_IDS": "input_ids", "EMBED": "model.embed_tokens.weight",
           "HIDDEN_STATES": "model.embed_tokens: the rows of input_ids",
           **{k: f"model.{v}" for k, v in stack.items() if k not in ("Y", "HIDDEN_STATES")}}
    for path, prog, frag in heads:
        kept = {n for n, _, _ in frag.tensors}
        for name, src in prog.tensors.items():
            if frag.names.get(name) in kept:
                out[frag.names[name]] = f"{path}.{src}" if src != "output" else "logits"
    return out


def _splice(body: list, code: str, new: list) -> None:
    """Replace the one statement `code` of `body` by the statements `new`."""
    at = [i for i, (c, _) in enumerate(body) if c.strip() == code]
    if len(at) != 1:
        raise LoweringError(f"composing a causal LM: expected one `{code}`, found {len(at)}")
    body[at[0]:at[0] + 1] = new


class CausalLMIO(DecoderIO):
    """Values, traces and seeded inputs of a causal LM program: one forward of the model,
    the layers' part values taken as each part is called."""

    arg_names = ("input_ids", "attention_mask", "position_ids", "cache")

    def __init__(self, parts, layers_of, per_layer_routing: bool, heads: list):
        super().__init__(parts, layers_of, per_layer_routing)
        self.heads = heads  # (path, program, fragment) of the final norm and the LM head

    def run(self, module, args: tuple) -> tuple[dict, dict]:
        ids, mask, pos, cache, _, _ = decode_args(module, tuple(args))
        values = {"INPUT_IDS": ids.detach().cpu().reshape(-1).numpy().astype(np.int64),
                  "EMBED": _np(module.model.embed_tokens.weight)}
        for path, prog, frag in self.heads:
            state = _sub(module, path).state_dict()
            keep = {n for n, _, _ in frag.tensors}
            for name, src in prog.tensors.items():
                if frag.names.get(name) in keep and src in state:
                    values[frag.names[name]] = _np(state[src])
        traces: dict[str, np.ndarray] = {}

        def forward():
            with torch.no_grad():
                module(ids, mask, pos, copy.deepcopy(cache))

        self.taking(module, values, traces, forward)
        return values, traces

    def expected(self, module, inputs: tuple) -> dict[str, np.ndarray]:
        """The logits of the model's forward (on a copy of the cache), [B, 1, V] as [B, V]."""
        ids, mask, pos, cache, batch, _ = decode_args(module, tuple(inputs))
        with torch.no_grad():
            out = module(ids, mask, pos, copy.deepcopy(cache))
        return {"LOGITS": _np(out.logits).reshape(batch, -1)}

    def seeded_inputs(self, module, example: tuple, seed: int) -> tuple:
        """Seeded token ids, KV lengths up to P (right padding: the mask attends to each
        request's first `len` cached positions and its new token, which sits at position
        `len`), and a DynamicCache of normal floats for every layer."""
        return seeded_decode_inputs(module, *decode_args(module, tuple(example))[4:], seed)


def seeded_decode_inputs(module, batch: int, past: int, seed: int) -> tuple:
    """(input_ids, attention_mask, position_ids, cache) of one decode step, seeded (see
    `CausalLMIO.seeded_inputs`), on the CPU."""
    from transformers.cache_utils import DynamicCache
    g = torch.Generator().manual_seed(seed)
    cfg, dt = module.config, next(module.parameters()).dtype
    attn = module.model.layers[0].self_attn
    lens = torch.randint(0, past + 1, (batch,), generator=g)
    ids = torch.randint(0, cfg.vocab_size, (batch, 1), generator=g)
    mask = (torch.arange(past + 1)[None] < lens[:, None]).long()
    mask[:, -1] = 1
    cache = DynamicCache()
    shape = (batch, cfg.num_key_value_heads, past, attn.head_dim)
    for i in range(len(module.model.layers)):
        cache.update(torch.randn(shape, generator=g).to(dt),
                     torch.randn(shape, generator=g).to(dt), i)
    return ids, mask, lens[:, None].clone(), cache


def _np(t) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()
