"""Traces that drive external streams: expert routing and KV-cache lengths.

Real traces (the paper's) are files; seeded synthetic generators with the same shapes are
the default, so every program runs without external data.

- expert routing: int `[B, k]` expert ids per token (`.npz` with key `data`, or `.npy`);
- KV-cache lengths: int `[B]` lengths per request (`.npy`, or CSV with one value per line).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from stepc.codes import TRACE_MISMATCH

MAX_EXTERNAL_ELEMENTS = 10_000_000  # elements of one external stream a run holds (a list)


class TraceError(Exception):
    """A trace file that cannot be used (error E0404); the message names the file and the
    problem, `span` the external stream it was meant for, when known."""

    code = TRACE_MISMATCH

    def __init__(self, message: str, span=None):
        super().__init__(message)
        self.span = span


def check_ids(arr: np.ndarray, n: int, what: str) -> None:
    """Every id of a selector trace is in 0..n-1; the error names the first bad one and
    where it is (row and column of a [B, k] trace)."""
    if not arr.size:
        return
    bad = np.argwhere((arr < 0) | (arr >= n))
    if not len(bad):
        return
    pos = tuple(int(i) for i in bad[0])
    where = {0: "", 1: f" at element {pos[0]}" if pos else "",
             2: f" at row {pos[0]}, column {pos[1]}" if len(pos) == 2 else ""}.get(
                 arr.ndim, f" at index {list(pos)}")
    more = f" ({len(bad) - 1:,} more out of range)" if len(bad) > 1 else ""
    raise TraceError(f"{what}: id {int(arr[pos])}{where} is out of range for MultiHot<{n}> "
                     f"(ids 0..{n - 1}){more}")


def selector_ids(arr: np.ndarray, n: int, dims: int, name: str, declared
                 ) -> tuple[np.ndarray, tuple[int, ...]]:
    """A selector trace for a rank-`dims` stream of MultiHot<n> (`declared`) as rows of ids,
    one row per stream element, and the stream shape it gives: a trace with one more dim
    holds a multi-hot selector per row of ids, one with `dims` dims a one-hot per id."""
    check_ids(arr, n, f"trace for `{name}`")
    if arr.ndim == dims + 1:
        return arr.reshape(-1, arr.shape[-1]), tuple(arr.shape[:-1])
    if arr.ndim == dims:
        return arr.reshape(-1, 1), tuple(arr.shape)
    raise TraceError(f"trace for `{name}` has shape {list(arr.shape)}, which does not fit "
                     f"{declared}")


def load_array(path: str) -> np.ndarray:
    """Load an integer array from `.npy`, `.npz` (key `data`) or `.csv`."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{path}: no such trace file")
    try:
        if p.suffix == ".npz":
            with np.load(p) as z:
                if "data" not in z.files:
                    raise TraceError(f"{path}: .npz trace needs an array named `data` "
                                     f"(found: {', '.join(z.files) or 'none'})")
                arr = z["data"]
        elif p.suffix == ".npy":
            arr = np.load(p, allow_pickle=False)
        elif p.suffix == ".csv":
            with open(p, newline="") as f:
                rows = [r for r in csv.reader(f) if r and not r[0].startswith("#")]
            arr = np.array([[int(x) for x in r] for r in rows])
            arr = arr[:, 0] if arr.ndim == 2 and arr.shape[1] == 1 else arr
        else:
            raise TraceError(f"{path}: unknown trace format (expected .npy, .npz or .csv)")
    except TraceError:
        raise
    except (ValueError, OSError) as e:
        raise TraceError(f"{path}: cannot read trace: {e}") from None
    return integer_trace(arr, path)


INT64_MAX = np.iinfo(np.int64).max


def integer_trace(arr: np.ndarray, where: str) -> np.ndarray:
    """A trace as int64: integers (unsigned ones that fit), or floats of integral values;
    anything else is a TraceError naming `where`."""
    if np.issubdtype(arr.dtype, np.bool_):
        return arr.astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and \
                np.all(np.mod(arr, 1) == 0) and \
                (arr.size == 0 or np.max(np.abs(arr)) <= INT64_MAX):
            return arr.astype(np.int64)
        raise TraceError(f"{where}: trace must hold integers, found {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > INT64_MAX:
        raise TraceError(f"{where}: trace value {int(arr.max()):,} is too large (at most "
                         f"{INT64_MAX:,})")
    return arr.astype(np.int64)


def load_routing(path: str, num_experts: int | None = None) -> np.ndarray:
    """Expert routing `[B, k]`: validated rank, non-negative ids below `num_experts`."""
    arr = load_array(path)
    if arr.ndim != 2:
        raise TraceError(f"{path}: expert routing must be [B, k] expert ids, found shape "
                         f"{list(arr.shape)}")
    validate_routing(arr, num_experts, path)
    return arr


def validate_routing(arr: np.ndarray, num_experts: int | None, where: str) -> None:
    if arr.size and arr.min() < 0:
        raise TraceError(f"{where}: negative expert id {int(arr.min())}")
    if num_experts is not None:
        check_ids(arr, num_experts, where)


def synthetic_routing(batch: int, experts: int, k: int, seed: int = 0,
                      skew: float = 1.0) -> np.ndarray:
    """Seeded top-k routing `[batch, k]`: distinct experts per token, drawn from a Zipf-like
    popularity with exponent `skew` (0: uniform)."""
    if k > experts:
        raise TraceError(f"top-k {k} exceeds the number of experts {experts}")
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, experts + 1) ** skew
    popularity = rng.permutation(popularity / popularity.sum())
    out = np.empty((batch, k), dtype=np.int64)
    for b in range(batch):
        out[b] = rng.choice(experts, size=k, replace=False, p=popularity)
    return out


def synthetic_kv_lengths(batch: int, mean: float = 1024, std: float = 512, seed: int = 0,
                         max_len: int | None = None) -> np.ndarray:
    """Seeded KV-cache lengths `[batch]`: a log-normal with the given mean and spread."""
    rng = np.random.default_rng(seed)
    sigma2 = np.log(1 + (std / mean) ** 2)
    lengths = rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), size=batch)
    lengths = np.maximum(1, np.round(lengths)).astype(np.int64)
    if max_len is not None:
        lengths = np.minimum(lengths, max_len)
    return lengths


def external_file(gen: dict, n: int | None, dims: int) -> np.ndarray | None:
    """The default data an external stream declares with `file=` (None without one): the
    file as a trace, or with `multihot=true` a 0/1 array of the stream's shape + [n]
    (one row per selector, as the reference toolchain writes them) turned into ids. Leading
    dims of size 1 the file leaves out are added."""
    path = gen.get("file")
    if not isinstance(path, str):
        return None
    arr = load_array(path)
    want = dims + 1 if gen.get("multihot") else dims
    if arr.ndim < want:  # the leading 1s of the stream's shape the file leaves out
        arr = arr.reshape((1,) * (want - arr.ndim) + arr.shape)
    if not gen.get("multihot"):
        return arr
    if n is None or arr.ndim != dims + 1 or arr.shape[-1] != n or not np.isin(arr, (0, 1)).all():
        raise TraceError(f"{path}: multihot=true needs a 0/1 array of the stream's {dims} dims "
                         f"+ [{n}], found shape {list(arr.shape)}")
    rows = arr.reshape(-1, n)
    counts = rows.sum(axis=1)
    if counts.size and (counts != counts[0]).any():
        raise TraceError(f"{path}: selectors with different numbers of targets "
                         f"({int(counts.min())} to {int(counts.max())}) cannot be written as "
                         "[.., k] ids")
    k = int(counts[0]) if counts.size else 1
    ids = np.nonzero(rows)[1].reshape(rows.shape[0], k)
    lead = list(arr.shape[:-1])
    return ids.reshape(lead) if k == 1 else ids.reshape(lead + [k])
