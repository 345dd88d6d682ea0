"""What a transformers decode attention computes, read from the module's parts rather than
its class name (stepc.torch.hf_attention lowers it): the q/k/v projections, separate
(`q_proj`, `k_proj`, `v_proj`) or fused (`qkv_proj`, Phi-3: the rows of q, then k, then v),
biases, per-head q/k RMS norms (scale `w`, or `1 + w` as Gemma writes it), the rotary
embedding (`x cos + rotate_half(x) sin` over the first dims the given cos/sin cover, the
rest passed through), the score scale (`scaling`) and logit soft-capping
(`tanh(s / cap) cap`, Gemma 2 and 3).

`looks_like` says whether a module has these parts; `read_form` reads them, refusing what
differs (a q/k norm over the whole projection, a norm or rotary embedding that is not one of
these, parts the lowering would not read) with the part and what it is.
"""

from __future__ import annotations

import copy
import inspect
import sys
from dataclasses import dataclass

import numpy as np
import torch

PROJECTIONS = ("q_proj", "k_proj", "v_proj")
FUSED = "qkv_proj"
NORMS = ("q_norm", "k_norm")
KNOWN_PARTS = {*PROJECTIONS, FUSED, "o_proj", *NORMS, "rotary_emb"}
_PROBE_SEED = 0


@dataclass(frozen=True)
class Slice:
    """A program weight's values: rows [start, stop) of a state-dict entry, plus `offset`
    (Gemma's norm scale `1 + w`)."""

    key: str
    start: int = 0
    stop: int | None = None
    offset: float = 0.0

    def take(self, state: dict) -> np.ndarray:
        w = state[self.key].detach().to("cpu", torch.float32).numpy()[self.start:self.stop]
        return w + np.float32(self.offset) if self.offset else w

    def source(self) -> str:
        rows = f"[{self.start}:{self.stop}]" if self.stop is not None else ""
        return f"{self.key}{rows}" + (f" + {self.offset:g}" if self.offset else "")


@dataclass(frozen=True)
class AttentionForm:
    """The parts of one attention module the program reads."""

    weights: dict[str, Slice]   # program tensor -> its values
    bias: bool                  # on q, k and v
    bias_o: bool                # on o
    scaling: float
    softcap: float | None       # logit soft-capping tanh(s / cap) cap
    norm_eps: float | None      # the q/k RMS norms' epsilon
    norm_offset: float          # their scale: w + offset
    rot: np.ndarray             # [rotary_dim, rotary_dim]: rotate_half(x) == x @ rot
    fused: bool                 # q, k and v are rows of one `qkv_proj`


def looks_like(module: torch.nn.Module) -> bool:
    """Projections, `o_proj`, a config with the head counts, `head_dim`, `scaling` and a
    `layer_idx`: the parts of transformers' decode attention."""
    cfg = getattr(module, "config", None)
    linear = torch.nn.Linear
    has_qkv = all(isinstance(getattr(module, p, None), linear) for p in PROJECTIONS) or \
        isinstance(getattr(module, FUSED, None), linear)
    return (has_qkv and isinstance(getattr(module, "o_proj", None), linear)
            and all(isinstance(getattr(cfg, a, None), int) for a in
                    ("hidden_size", "num_attention_heads", "num_key_value_heads"))
            and isinstance(getattr(module, "head_dim", None), int)
            and isinstance(getattr(module, "scaling", None), (int, float))
            and hasattr(module, "layer_idx") and _takes_decode_arguments(module))


def _takes_decode_arguments(module: torch.nn.Module) -> bool:
    """forward(hidden_states, position_embeddings, attention_mask, ...)."""
    try:
        sig = inspect.signature(inspect.unwrap(type(module).forward))
    except (TypeError, ValueError):
        return False
    return list(sig.parameters)[1:4] == ["hidden_states", "position_embeddings",
                                         "attention_mask"]


def read_form(module: torch.nn.Module, rotary_dim: int, fail) -> AttentionForm:
    """The module's form for cos/sin covering `rotary_dim` dims of a head; `fail(what)`
    makes the refusal."""
    cfg = module.config
    heads, kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, module.head_dim
    extra = sorted(n for n, _ in module.named_children() if n not in KNOWN_PARTS)
    if extra:
        raise fail(f"submodule{'s' if len(extra) > 1 else ''} {', '.join(extra)} (not a "
                   "projection, q/k norm or rotary embedding) would not be lowered")
    fused = isinstance(getattr(module, FUSED, None), torch.nn.Linear)
    weights, biased = {}, []
    if fused:
        rows = {"q": (0, heads * d), "k": (heads * d, (heads + kv) * d),
                "v": ((heads + kv) * d, (heads + 2 * kv) * d)}
        proj = module.qkv_proj
        if tuple(proj.weight.shape) != ((heads + 2 * kv) * d, cfg.hidden_size):
            raise fail(f"qkv_proj.weight is {list(proj.weight.shape)}, not the [(H + 2 KV) "
                       f"head_dim, hidden] = [{(heads + 2 * kv) * d}, {cfg.hidden_size}] of "
                       "fused q, k, v rows")
        for p, (a, b) in rows.items():
            weights[f"W{p.upper()}"] = Slice(f"{FUSED}.weight", a, b)
            if proj.bias is not None:
                weights[f"B{p.upper()}"] = Slice(f"{FUSED}.bias", a, b)
        biased = [proj.bias is not None] * 3
    else:
        for p in "qkv":
            lin = getattr(module, f"{p}_proj")
            weights[f"W{p.upper()}"] = Slice(f"{p}_proj.weight")
            biased.append(lin.bias is not None)
            if lin.bias is not None:
                weights[f"B{p.upper()}"] = Slice(f"{p}_proj.bias")
    if len(set(biased)) > 1:
        raise fail("q, k and v projections with and without biases are not lowered (all "
                   "three or none)")
    weights["WO"] = Slice("o_proj.weight")
    if module.o_proj.bias is not None:
        weights["BO"] = Slice("o_proj.bias")
    eps, offset = _norms(module, d, fail)
    if eps is not None:
        for p in "qk":
            weights[f"{p.upper()}N"] = Slice(f"{p}_norm.weight", offset=offset)
    softcap = getattr(module, "attn_logit_softcapping", None)
    if softcap is not None and not (isinstance(softcap, (int, float)) and softcap > 0):
        raise fail(f"attn_logit_softcapping {softcap!r} is not a positive number")
    return AttentionForm(weights, biased[0], module.o_proj.bias is not None,
                         float(module.scaling), float(softcap) if softcap else None, eps,
                         offset, _rotation(module, d, rotary_dim, fail), fused)


def _norms(module, head_dim: int, fail) -> tuple[float | None, float]:
    """(epsilon, scale offset) of the per-head q/k RMS norms, (None, 0) without them."""
    present = [n for n in NORMS if isinstance(getattr(module, n, None), torch.nn.Module)]
    if not present:
        return None, 0.0
    if len(present) == 1:
        raise fail(f"only {present[0]} of q_norm and k_norm is lowered as a pair")
    found = []
    for name in NORMS:
        norm = getattr(module, name)
        w = getattr(norm, "weight", None)
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
        what = f"{name} ({type(norm).__name__})"
        if not isinstance(w, torch.Tensor) or not isinstance(eps, float):
            raise fail(f"{what} has no weight and epsilon of an RMSNorm")
        if w.numel() != head_dim:
            raise fail(f"{what} normalises {w.numel()} features: a q/k norm over the whole "
                       f"projection, not per head of {head_dim}")
        offset = _norm_offset(norm, head_dim, float(eps))
        if offset is None:
            raise fail(f"{what} is not an RMSNorm scaled by its weight w or by 1 + w")
        found.append((float(eps), offset))
    if found[0] != found[1]:
        raise fail("q_norm and k_norm of different epsilons or scale forms are not lowered")
    return found[0]


def _norm_offset(norm: torch.nn.Module, head_dim: int, eps: float) -> float | None:
    """0 when `norm` computes x / rms(x) * w, 1 for x / rms(x) * (1 + w), else None: probed
    on a float32 copy with seeded weights (any device, any dtype)."""
    g = torch.Generator().manual_seed(_PROBE_SEED)
    probe = copy.deepcopy(norm).to_empty(device="cpu").float()
    with torch.no_grad():
        probe.weight.copy_(torch.randn(probe.weight.shape, generator=g))
        x = torch.randn(2, head_dim, generator=g)
        y = probe(x).float()
        base = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        w = probe.weight.reshape(-1)
    return next((o for o in (0.0, 1.0)
                 if torch.allclose(y, base * (w + o), rtol=1e-4, atol=1e-5)), None)


def _rotation(module, head_dim: int, rotary_dim: int, fail) -> np.ndarray:
    """R with `rotate_half(x) == x @ R` for the first `rotary_dim` dims, as the module's
    `apply_rotary_pos_emb` computes; refuses an embedding of another form."""
    if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
        raise fail(f"rotary embeddings over {rotary_dim} of the {head_dim} dims of a head are "
                   "not lowered")
    owner = next(c for c in type(module).__mro__ if "forward" in vars(c))
    modeling = sys.modules.get(owner.__module__)
    apply, half = (getattr(modeling, f, None) for f in ("apply_rotary_pos_emb", "rotate_half"))
    if apply is None or half is None:
        raise fail(f"{owner.__module__} has no apply_rotary_pos_emb and rotate_half: the "
                   "rotary embedding is not read")
    with torch.no_grad():
        rot = half(torch.eye(rotary_dim)).numpy()  # rotate_half is linear: x R, R = its image of I
    g = torch.Generator().manual_seed(_PROBE_SEED)
    q, k = (torch.randn(1, 1, 1, head_dim, generator=g) for _ in range(2))
    cos, sin = (torch.randn(1, 1, rotary_dim, generator=g) for _ in range(2))
    try:
        with torch.no_grad():
            got = apply(q, k, cos, sin)
    except (RuntimeError, TypeError, ValueError, IndexError):
        got = None
    partial = f" (partial rotary: {rotary_dim} of {head_dim} dims)" if rotary_dim < head_dim \
        else ""
    if got is None:
        raise fail(f"{owner.__module__}.apply_rotary_pos_emb does not take cos/sin over "
                   f"{rotary_dim} of the {head_dim} dims of a head{partial}")
    want = [rope_reference(t.reshape(1, -1).numpy(), cos.reshape(1, -1).numpy(),
                           sin.reshape(1, -1).numpy(), rot) for t in (q, k)]
    if not all(np.allclose(g_.reshape(1, -1).numpy(), w, rtol=1e-5, atol=1e-5)
               for g_, w in zip(got, want)):
        raise fail(f"{owner.__module__}.apply_rotary_pos_emb is not x cos + rotate_half(x) "
                   f"sin over the first {rotary_dim} dims{partial}")
    return rot.astype(np.float32)


def rope_reference(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rot: np.ndarray):
    """x cos + (x R) sin over the first dims cos covers, the rest of x passed through."""
    r = cos.shape[-1]
    out = x.copy()
    out[:, :r] = x[:, :r] * cos + (x[:, :r] @ rot) * sin
    return out


def full_rotation(form: AttentionForm, head_dim: int) -> np.ndarray:
    """ROT over the whole head: the rotary block, zeros over the dims passed through."""
    r = form.rot.shape[0]
    out = np.zeros((head_dim, head_dim), np.float32)
    out[:r, :r] = form.rot
    return out


def pad_rotary(cos: np.ndarray, sin: np.ndarray, head_dim: int) -> tuple:
    """cos and sin over the whole head: 1 and 0 over the dims passed through, so that
    `x cos + (x ROT) sin` leaves them as they are."""
    n, r = cos.shape
    c = np.ones((n, head_dim), np.float32)
    s = np.zeros((n, head_dim), np.float32)
    c[:, :r], s[:, :r] = cos, sin
    return c, s

