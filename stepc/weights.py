"""Tensor values from a weights file for `stepc sim --weights`: safetensors, or a PyTorch
state dict (`.pt`/`.pth`/`.bin`, read with `torch.load(weights_only=True)`, which
unpickles no code).

Entries are matched to the program's tensors by name, a state-dict key's dots read as
underscores (`experts.up_proj` -> `experts_up_proj`), under one prefix of whole dotted
components, so a program emitted by `stepc from-torch` takes the module's state dict as is,
and a whole model's checkpoint too (`model.layers.0.mlp.gate_proj.weight` fills
`gate_proj_weight` under the prefix `model.layers.0.mlp.`). Shapes must agree up to unit
dims (a bias `[F]` fills a tensor `[1, F]`; an input `[batch, seq, C]` its `[B, C]`).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np

# safetensors dtype codes -> (numpy dtype of the stored bytes, bytes per element)
_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
              "U8": np.uint8, "BOOL": np.bool_}


class WeightsError(Exception):
    """A weights file that cannot be read or does not fit the program (a usage error)."""


def load_weights(path: str) -> dict[str, np.ndarray]:
    """Every tensor of a weights file, as float32/integer numpy arrays (bf16 widened)."""
    p = Path(path)
    if not p.is_file():
        raise WeightsError(f"{path}: no such weights file")
    if p.suffix == ".safetensors":
        return _read_safetensors(p)
    if p.suffix in (".pt", ".pth", ".bin"):
        return _read_state_dict(p)
    raise WeightsError(f"{path}: unknown weights format (expected .safetensors, or a PyTorch "
                       "state dict .pt/.pth/.bin)")


def _read_safetensors(p: Path) -> dict[str, np.ndarray]:
    """The safetensors format: an 8-byte little-endian header length, a JSON header of
    {name: {dtype, shape, data_offsets}}, then the raw little-endian bytes."""
    try:
        raw = p.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
    except (OSError, struct.error, ValueError) as e:
        raise WeightsError(f"{p}: not a safetensors file ({e})") from None
    body = memoryview(raw)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _ST_DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise WeightsError(f"{p}: tensor `{name}` has unsupported dtype {info.get('dtype')}")
        start, end = info["data_offsets"]
        arr = np.frombuffer(body[start:end], dtype=np.dtype(dtype).newbyteorder("<"))
        if info["dtype"] == "BF16":  # bf16 is the top half of a float32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        if arr.size != math.prod(info["shape"]):
            raise WeightsError(f"{p}: tensor `{name}` holds {arr.size} elements, its header "
                               f"says {info['shape']}")
        out[name] = arr.reshape(info["shape"])
    return out


def _read_state_dict(p: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise WeightsError(f"{p}: reading a PyTorch state dict needs torch "
                           "(pip install 'stepc[torch]'), or save it as .safetensors") from None
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds for a bad or unsafe pickle
        raise WeightsError(f"{p}: cannot load as a state dict with weights_only=True: "
                           f"{str(e).splitlines()[0]}") from None
    if not isinstance(state, dict):
        raise WeightsError(f"{p}: expected a state dict (name -> tensor), found "
                           f"{type(state).__name__}")
    return {k: v.detach().to(torch.float32 if v.is_floating_point() else v.dtype).numpy()
            for k, v in state.items() if isinstance(v, torch.Tensor)}


def match_weights(tensors: Mapping, arrays: dict[str, np.ndarray], prefix: str | None = None,
                  allow_missing: bool = False) -> tuple[dict[str, np.ndarray], list[str]]:
    """The values of the program's tensors found in `arrays`, and the notes to print.

    Keys are read under one prefix of whole dotted components (`prefix`, else the one under
    which the keys name the most tensors: `model.layers.0.mlp.` for a checkpoint's
    `model.layers.0.mlp.gate_proj.weight`); keys outside it are ignored. Refused: an
    entry under the prefix that names no tensor, one for an output or of the wrong shape,
    and a weight tensor with no entry (unless `allow_missing`: it keeps its declared
    initialiser). An input tensor with no entry keeps its declared initialiser.
    """
    names = {}  # (prefix, tensor) -> key
    for key in arrays:
        for p in _prefixes(key):
            name = _tensor_name(key[len(p):], tensors)
            if name is not None:
                names.setdefault((p, name), key)
    if prefix is None:
        prefix = _best_prefix(names, tensors)
    elif prefix and not prefix.endswith("."):
        prefix += "."
    under = [k for k in arrays if k.startswith(prefix)]
    if not under:
        raise WeightsError(f"no entry starts with `{prefix}`")
    matched, extra = {}, []
    for key in under:
        name = _tensor_name(key[len(prefix):], tensors)
        if name is None:
            extra.append(key)
            continue
        t, arr = tensors[name], arrays[key]
        if t.role == "output":
            raise WeightsError(f"`{key}`: tensor `{name}` is an output of the program; its "
                               "values are computed, not loaded")
        if [d for d in arr.shape if d != 1] != [d for d in t.shape if d != 1] and not (
                t.role == "input" and arr.ndim > 2 and arr.size == math.prod(t.shape)
                and arr.shape[-1] == t.shape[-1]) and not (  # a [batch, seq, C] input folds
                arr.ndim >= 2 and len(t.shape) == arr.ndim + 1
                and arr.shape[1:] == tuple(t.shape[2:])
                and arr.shape[0] == t.shape[0] * t.shape[1]):  # [2F, D] read as halves [2, F, D]
            raise WeightsError(f"`{key}` holds {list(arr.shape)} but tensor `{name}` is "
                               f"declared {list(t.shape)}")
        matched[name] = arr.reshape(t.shape)
    if extra:
        raise WeightsError(f"{len(extra)} entr{'ies' if len(extra) > 1 else 'y'} under "
                           f"`{prefix}` name no tensor of the program: {_listed(extra)}")
    missing = sorted(n for n, t in tensors.items() if t.role == "weight" and n not in matched)
    if missing and not allow_missing:
        raise WeightsError(f"no entry for the weight tensor{'s' if len(missing) > 1 else ''} "
                           f"{_listed(missing)}" + (f" under `{prefix}`" if prefix else "")
                           + " (--allow-missing-weights keeps their declared initialiser)")
    notes = []
    if missing:
        notes.append(f"{_listed(missing)} keep their declared initialiser "
                     "(--allow-missing-weights)")
    inputs = sorted(n for n, t in tensors.items() if t.role == "input" and n not in matched)
    if inputs:
        notes.append(f"input tensor{'s' if len(inputs) > 1 else ''} {_listed(inputs)} keep "
                     "their declared initialiser")
    outside = len(arrays) - len(under)
    if outside:
        notes.append(f"read the entries under `{prefix}`; {outside} others ignored")
    return matched, notes


def _prefixes(key: str) -> list[str]:
    """"" and every leading run of whole dotted components of `key`."""
    parts = key.split(".")
    return [""] + [".".join(parts[:i]) + "." for i in range(1, len(parts))]


def _tensor_name(rest: str, tensors: Mapping) -> str | None:
    """The program tensor a key names: itself, or with its dots read as underscores."""
    if rest in tensors:
        return rest
    name = rest.replace(".", "_")
    return name if name in tensors else None


def _best_prefix(names: dict, tensors: Mapping) -> str:
    """The prefix under which keys name the most tensors (weights first); several that tie
    are ambiguous."""
    score: dict[str, tuple[int, int]] = {}
    for p, name in names:
        w, n = score.get(p, (0, 0))
        score[p] = (w + (tensors[name].role == "weight"), n + 1)
    if not score:
        raise WeightsError("no entry names a tensor of the program (keys are matched by "
                           "tensor name, dots read as underscores, under a common prefix)")
    best = max(score.values())
    tied = sorted(p for p, s in score.items() if s == best)
    if len(tied) > 1:
        raise WeightsError(f"entries for the program's tensors appear under several prefixes "
                           f"({_listed([p or '(none)' for p in tied])}); choose one with "
                           "--weights-prefix")
    return tied[0]


def _listed(items: list[str], most: int = 8) -> str:
    shown = ", ".join(f"`{i}`" for i in items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")
