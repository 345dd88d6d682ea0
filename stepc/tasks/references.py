"""The tasks' numpy references and input draws. A reference takes the inputs by tensor name
and the external streams' data by stream name, and returns the outputs by tensor name,
computed in float64."""

from __future__ import annotations

import numpy as np

from stepc.tasks.records import ExternalSpec, TensorSpec

RMS_EPS = 1e-6  # RMSNorm's epsilon (stepc's rms_inv default)
LAYERNORM_EPS = 1e-5  # LayerNorm's epsilon (PyTorch's default)
# `wide_rows`: row r of a standard-normal draw is scaled by ROW_SCALES[r % 3]. Rows of 100
# overflow exp in f32 (past 88.7) unless a softmax subtracts the row's maximum; rows of
# 1e-4 have a mean square (1e-8) the norms' epsilon outweighs, so a norm must add it.
ROW_SCALES = (1.0, 1e-4, 100.0)


def draw_tensor(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """An input tensor's values: standard normal (`wide_rows`: with rows scaled by
    ROW_SCALES in turn), or a fixed matrix the task gives."""
    if spec.init == "rotate_half":
        return rotate_half_matrix(spec.shape[0]).astype(np.float32)
    values = rng.standard_normal(spec.shape)
    if spec.init == "wide_rows":
        values *= np.resize(ROW_SCALES, spec.shape[0])[:, None]
    return values.astype(np.float32)


def draw_external(spec: ExternalSpec, rng: np.random.Generator) -> np.ndarray:
    """An external stream's data, as the simulator takes a trace: [rows, topk] expert ids,
    or [rows] lengths."""
    if spec.kind == "routing":
        return np.stack([rng.choice(spec.experts, spec.topk, replace=False)
                         for _ in range(spec.rows)]).astype(np.int64)
    steps = np.arange(spec.low, spec.high + 1, spec.multiple)
    return rng.choice(steps, spec.rows).astype(np.int64)


def rotate_half_matrix(d: int) -> np.ndarray:
    """R with x @ R = rotate_half(x) = concat(-x[d/2:], x[:d/2]) for each row x."""
    h = d // 2
    r = np.zeros((d, d))
    r[np.arange(h) + h, np.arange(h)] = -1.0
    r[np.arange(h), np.arange(h) + h] = 1.0
    return r


def _f64(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _swiglu(x, w_gate, w_up, w_down):
    return (_silu(x @ w_gate) * (x @ w_up)) @ w_down


def gemm(inputs, streams):
    """C = A B."""
    t = _f64(inputs)
    return {"C": t["A"] @ t["B"]}


def batched_matmul(inputs, streams):
    """C[i] = A[i] B[i] for every batch entry i."""
    t = _f64(inputs)
    return {"C": np.einsum("bmk,bkn->bmn", t["A"], t["B"])}


def swiglu_mlp(inputs, streams):
    """Y = (silu(X W_gate) * (X W_up)) W_down."""
    t = _f64(inputs)
    return {"Y": _swiglu(t["X"], t["W_gate"], t["W_up"], t["W_down"])}


def rmsnorm(inputs, streams):
    """Y = X / sqrt(mean(X^2, row) + eps) * G, G a [1, H] gain."""
    t = _f64(inputs)
    x = t["X"]
    return {"Y": x / np.sqrt((x * x).mean(axis=1, keepdims=True) + RMS_EPS) * t["G"]}


def layernorm(inputs, streams):
    """Y = (X - mean(X, row)) / sqrt(var(X, row) + eps) * G + BIAS (biased variance)."""
    t = _f64(inputs)
    d = t["X"] - t["X"].mean(axis=1, keepdims=True)
    return {"Y": d / np.sqrt((d * d).mean(axis=1, keepdims=True) + LAYERNORM_EPS) * t["G"]
            + t["BIAS"]}


def softmax(inputs, streams):
    """Y = softmax of each row of X."""
    x = _f64(inputs)["X"]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"Y": e / e.sum(axis=1, keepdims=True)}


def rope(inputs, streams):
    """Y = X * COS + rotate_half(X) * SIN (rotate_half as the given matrix R)."""
    t = _f64(inputs)
    x = t["X"]
    return {"Y": x * t["COS"] + (x @ rotate_half_matrix(x.shape[1])) * t["SIN"]}


def moe_topk(inputs, streams):
    """Y[b] = sum over token b's experts e_k of RW[b, k] * SwiGLU_{e_k}(X[b])."""
    t = _f64(inputs)
    ids = streams["routing"]
    y = np.zeros((t["X"].shape[0], t["W_down"].shape[2]))
    for b, row in enumerate(ids):
        for k, e in enumerate(row):
            y[b] += t["RW"][b, k] * _swiglu(t["X"][b:b + 1], t["W_gate"][e], t["W_up"][e],
                                            t["W_down"][e])[0]
    return {"Y": y}


def decode_attention(inputs, streams):
    """O, per request i: softmax(q_i K_i^T / sqrt(d)) V_i over the first len_i rows of the
    request's slot (rows i * MAXN ...) of the caches K and V; q_i is Q's rows of request i
    (QPK query heads sharing the request's KV rows)."""
    t = _f64(inputs)
    q, k, v = t["Q"], t["K"], t["V"]
    lens = streams["kv_lens"]
    batch, d = len(lens), q.shape[1]
    qpk, maxn = q.shape[0] // batch, k.shape[0] // batch
    out = np.zeros_like(q)
    for i, n in enumerate(lens):
        rows = slice(i * maxn, i * maxn + int(n))
        s = q[i * qpk:(i + 1) * qpk] @ k[rows].T / np.sqrt(d)
        e = np.exp(s - s.max(axis=1, keepdims=True))
        out[i * qpk:(i + 1) * qpk] = (e / e.sum(axis=1, keepdims=True)) @ v[rows]
    return {"O": out}


REFERENCES = {f.__name__: f for f in (gemm, batched_matmul, swiglu_mlp, rmsnorm, layernorm,
                                      softmax, rope, moe_topk, decode_attention)}
