"""Token-by-token tests of the simulator behaviors of the on-chip memory operators
(Bufferize, Streamify); notation and harness in tests/behavior_harness.py."""

from __future__ import annotations

import sympy
from behavior_harness import F32, Names, paper, show, st, times, toks

from stepc.sim.harness import run_operator
from stepc.types import Buffer

# =====================================================================================
# On-chip memory: Bufferize, Streamify
# =====================================================================================


def _bufferize(seq, rank, names, t=None):
    outs, _ = run_operator("Bufferize", {"rank": rank}, {"in": paper(seq, names)},
                           times={"in": t} if t else None)
    return outs[0]


def test_bufferize_2_6_examples():
    """2.6: b = 1: `a b c S1 d e f S2 D` -> `B[a b c] B[d e f] S1 D`; b = 2:
    `B[[a b c],[d e f]] D`."""
    names = Names()
    names.tiles("a b c d e f")
    out = _bufferize("a b c S1 d e f S2 D", 1, names)
    assert show(out, names) == "B[a b c S1 D] B[d e f S1 D] S1 D"
    assert [p.shape for _, p, _ in out] == [(3,), (3,)]
    out = _bufferize("a b c S1 d e f S2 D", 2, names)
    assert show(out, names) == "B[a b c S1 d e f S2 D] D"
    assert out[0][1].shape == (2, 3)


def test_bufferize_ragged_outermost_buffered_dim():
    """The Bufferize/Streamify figure: [2, D_ragged, 2] bufferized at rank 2 -> [2] of
    buffers with 2 and 3 rows."""
    names = Names()
    names.tiles("a b c d e f g h i j")
    out = _bufferize("a b S1 c d S2 e f S1 g h S1 i j S2 D", 2, names)
    assert show(out, names) == "B[a b S1 c d S2 D] B[e f S1 g h S1 i j S2 D] D"
    assert [p.shape for _, p, _ in out] == [(2, 2), (3, 2)]


def test_bufferize_takes_one_cycle_per_element():
    """2.6: one input element per cycle; the buffer is sent at completion."""
    names = Names()
    names.tiles("a b c d e f")
    out = _bufferize("a b c S1 d e f S1 D", 1, names)
    assert times(out) == [4, 7]


def _streamify(buffers, attrs, ref=None, info_in=None, t=None):
    inputs = {"in": buffers}
    if ref is not None:
        inputs["ref"] = paper(ref)
    outs, _ = run_operator("Streamify", attrs, inputs, info_in=info_in,
                           times={"in": t} if t else None)
    return outs[0]


def _buffers(seq, rank, names):
    return toks(_bufferize(seq, rank, names))


def test_bufferize_then_streamify_static_repeat_2_7_example():
    """2.7: the buffers of 2.6 (b = 1), R = [2]:
    `a b c S1 a b c S2 d e f S1 d e f S3 D`."""
    names = Names()
    names.tiles("a b c d e f")
    bufs = _buffers("a b c S1 d e f S2 D", 1, names)
    out = _streamify(bufs, {"repeat": [2]})
    assert show(out, names) == "a b c S1 a b c S2 d e f S1 d e f S3 D"


def test_streamify_nested_repeat_list():
    """Errata 5: R = [R_1..R_k] nests prod(R) copies; copy (i_1..i_k) ends with
    S_(rank+t), t = trailing repeat indices at their last value."""
    names = Names()
    names.tiles("x y")
    bufs = _buffers("x y S1 D", 1, names)
    out = _streamify(bufs, {"repeat": [2, 2]})
    assert show(out, names) == "x y S1 x y S2 x y S1 x y S3 D"


def test_streamify_empty_repeat_streams_once():
    """2.7: with an empty repeat list the buffer is streamed once, final stop rank + s."""
    names = Names()
    names.tiles("a b c d")
    bufs = _buffers("a b S1 c d S1 D", 1, names)
    assert show(_streamify(bufs, {}), names) == "a b S1 c d S1 D"
    bufs = _buffers("a b S1 c d S2 D", 1, names)
    assert show(_streamify(bufs, {}), names) == "a b S1 c d S2 D"


def test_streamify_affine_view_of_a_static_buffer():
    """2.7 (StaticStreamify): buffer element index = sum(idx * stride), stops of 2.1."""
    names = Names()
    names.tiles("a b c d")
    bufs = _buffers("a b c d S1 D", 1, names)
    out = _streamify(bufs, {"repeat": [2], "stride": [1], "shape": [2]})
    assert show(out, names) == "a b S1 a b S2 D"
    out = _streamify(bufs, {"repeat": [2], "stride": [2], "shape": [2]})
    assert show(out, names) == "a c S1 a c S2 D"


def test_streamify_with_ref_2_8_example():
    """2.8 in the paper form (errata 7): one buffer `B[x y]` (a rank-0 buffer stream [1]),
    ref [1, 3] (c = 1 more dim) -> `x y S1 x y S1 x y S2 D` of shape [1, 3, 2]."""
    names = Names()
    names.tiles("x y")
    bufs = _buffers("x y S1 D", 1, names)
    out = _streamify(bufs, {}, ref="r r r S1 D",
                     info_in={"in": st((1,), Buffer(F32, (2,))), "ref": st((1, 3))})
    assert show(out, names) == "x y S1 x y S1 x y S2 D"


def test_bufferize_then_streamify_with_ref_paper_figure():
    """The Bufferize/Streamify figure: [2, D_ragged, 2] bufferized at rank 2 is a rank-0
    stream [2] of buffers; a ref [2, D'] (c = 1) reads buffer 0 twice and buffer 1 three
    times: output [2, D', D_ragged, 2] (rank 3)."""
    names = Names()
    names.tiles("a b c d e f g h i j")
    bufs = _buffers("a b S1 c d S2 e f S1 g h S1 i j S2 D", 2, names)
    D, E = sympy.Symbol("D"), sympy.Symbol("E")
    out = _streamify(bufs, {}, ref="r r S1 r r r S1 D",
                     info_in={"in": st((2,), Buffer(F32, (D, 2))), "ref": st((2, E))})
    assert show(out, names) == (
        "a b S1 c d S2 a b S1 c d S3 "
        "e f S1 g h S1 i j S2 e f S1 g h S1 i j S2 e f S1 g h S1 i j S3 D")


def test_streamify_with_ref_two_extra_dims():
    """Errata 7 with c = 2: a group ends at a ref stop >= 2; a ref S1 inside the group
    closes one read of the buffer one level higher."""
    names = Names()
    names.tiles("x y u v")
    bufs = _buffers("x y S1 u v S1 D", 1, names)  # [2] of Buffer[2]
    out = _streamify(bufs, {}, ref="r S1 r S2 r r S2 D",
                     info_in={"in": st((2,), Buffer(F32, (2,))),
                              "ref": st((2, 2, sympy.Symbol("E")))})
    assert show(out, names) == "x y S2 x y S3 u v S1 u v S3 D"


def test_streamify_emits_one_element_per_cycle():
    """2.7/2.8: 1 output element per cycle (no PMU cost)."""
    names = Names()
    names.tiles("x y")
    bufs = _buffers("x y S1 D", 1, names)
    out = _streamify(bufs, {"repeat": [3]})
    ts = times(out)
    assert [b - a for a, b in zip(ts, ts[1:])] == [1] * 5
