"""Tensor values from a weights file for `stepc sim --weights`: safetensors, or a PyTorch
state dict (`.pt`/`.pth`/`.bin`, read with `torch.load(weights_only=True)`, which
unpickles no code).

Entries are matched to the program's tensors by name, a state-dict key's dots read as
underscores (`experts.up_proj` -> `experts_up_proj`), so a program emitted by
`stepc from-torch` takes the module's state dict as is. Shapes must agree up to unit dims
(a bias `[F]` fills a tensor `[1, F]`).
"""

from __future__ import annotations

import json
import math
import struct
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


def match_weights(tensors: dict, arrays: dict[str, np.ndarray]
                  ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The values of the program's tensors found in `arrays`, and the entries it has no
    tensor for. Refuses an entry for an output tensor or of the wrong shape."""
    matched, unused = {}, []
    for key, arr in arrays.items():
        name = key if key in tensors else key.replace(".", "_")
        t = tensors.get(name)
        if t is None:
            unused.append(key)
            continue
        if t.role == "output":
            raise WeightsError(f"`{key}`: tensor `{name}` is an output of the program; its "
                               "values are computed, not loaded")
        if [d for d in arr.shape if d != 1] != [d for d in t.shape if d != 1]:
            raise WeightsError(f"`{key}` holds {list(arr.shape)} but tensor `{name}` is "
                               f"declared {list(t.shape)}")
        matched[name] = arr.reshape(t.shape)
    return matched, unused
