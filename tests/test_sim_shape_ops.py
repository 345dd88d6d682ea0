"""Token-by-token tests of the simulator behaviors of the shape operators (Flatten, Reshape,
Promote, Expand, Repeat, Zip); notation and harness in tests/behavior_harness.py."""

from __future__ import annotations

import pytest
import sympy
from behavior_harness import Names, consumer, fn, paper, run_net, show, st, times

from stepc.sim.harness import run_operator
from stepc.sim.kernel import SimError
from stepc.sim.tokens import TileVal

# =====================================================================================
# Shape operators: Flatten, Reshape, Promote, Expand, Repeat, Zip
# =====================================================================================


def test_flatten_paper_2_2_D0_example():
    """Paper 3.1 / semantics 0.2: `1 2 S1 3 S2 4 S1 5 6 7 S2 D` has shape [2, 2, D0];
    Flatten(min=0, max=1) gives [2, D0']: the inner S1s vanish, S2 becomes S1."""
    outs, _ = run_operator("Flatten", {"min": 0, "max": 1},
                           {"in": paper("1 2 S1 3 S2 4 S1 5 6 7 S2 D")})
    assert show(outs[0]) == "1 2 3 S1 4 5 6 7 S1 D"


def test_flatten_2_19_example():
    outs, _ = run_operator("Flatten", {"min": 0, "max": 1},
                           {"in": paper("a b c S1 d e f S2 D")})
    assert show(outs[0]) == "a b c d e f S1 D"


def test_flatten_stop_rule_above_and_inside_the_range():
    """s <= min unchanged; min < s <= max -> min; s > max -> s - (max - min)."""
    outs, _ = run_operator("Flatten", {"min": 1, "max": 2},
                           {"in": paper("a S1 b S2 c S1 d S3 e S1 f S3 D")})
    assert show(outs[0]) == "a S1 b S1 c S1 d S2 e S1 f S2 D"


def test_flatten_to_rank0_drops_every_stop():
    """min = 0: stops inside the range become plain values."""
    outs, _ = run_operator("Flatten", {"min": 0, "max": 2},
                           {"in": paper("a S1 b S2 c S1 d S2 D")})
    assert show(outs[0]) == "a b c d D"


def test_flatten_adds_no_cycles():
    """2.19: 0 cycles (one channel hop)."""
    outs, _ = run_operator("Flatten", {"min": 0, "max": 1}, {"in": paper("a b S1 c S1")},
                           times={"in": [0, 4, 9]})
    assert times(outs[0]) == [1, 5, 10]


def _reshape(seq, chunk, rank=0, pad=True, names=None, t=None):
    attrs = {"chunk": chunk, "rank": rank, "pad": fn("zero") if pad else None}
    outs, _ = run_operator("Reshape", attrs, {"in": paper(seq, names)},
                           times={"in": t} if t else None)
    return outs


def test_reshape_b0_with_padding_2_20_example():
    """2.20: b=0, S=2, pad p: `a b c d e S1 D` -> `a b S1 c d S1 e p S2 D`; the pad output
    marks the padding element."""
    names = Names()
    names.tiles("a b c d e", rows=4, cols=8)
    data, pad = _reshape("a b c d e S1 D", 2, names=names)
    assert [s for _, _, s in data] == [0, 1, 0, 1, 0, 2]
    assert show(data[:5], names) == "a b S1 c d S1 e D"
    p = data[5][1]
    assert isinstance(p, TileVal) and (p.rows, p.cols) == (4, 8)
    assert p.valid == 0  # a pad tile has no valid rows (the tile `offset`)
    assert show(pad) == "F F S1 F F S1 F T S2 D"


def test_reshape_rank0_input_is_padded_at_end_of_stream():
    """2.20: a rank-0 input that ends mid-chunk is padded and closed with S1."""
    names = Names()
    names.tiles("a b c")
    data, pad = _reshape("a b c D", 2, names=names)
    assert [s for _, _, s in data] == [0, 1, 0, 1]
    assert show(data[:3], names) == "a b S1 c D"
    assert data[3][1].valid == 0
    assert show(pad) == "F F S1 F T S1 D"


def test_reshape_rank0_moe_pack_to_tile():
    """Paper 3.3: [D_i] -> [ceil(D_i/4), 4] for D_i = 6 (two pad rows)."""
    names = Names()
    names.tiles("r0 r1 r2 r3 r4 r5", cols=64)
    data, pad = _reshape("r0 r1 r2 r3 r4 r5 D", 4, names=names)
    assert [s for _, _, s in data] == [0, 0, 0, 1, 0, 0, 0, 1]
    assert [p.valid for _, p, _ in data] == [1, 1, 1, 1, 1, 1, 0, 0]
    assert show(pad) == "F F F F S1 F F T T S1 D"


def test_reshape_b0_exact_chunks_need_no_padding():
    data, pad = _reshape("a b S1 c d S1 D", 2, pad=False)
    assert show(data) == "a b S2 c d S2 D"
    assert show(pad) == "F F S2 F F S2 D"
    data, _ = _reshape("a b c d D", 2, pad=False)
    assert show(data) == "a b S1 c d S1 D"


def test_reshape_b0_pads_a_chunk_cut_by_a_higher_stop():
    """2.20: an element carrying S_s in the middle of a chunk is followed by S - count pad
    elements, the last pad carrying S_(s+1); a full chunk's stop S_s becomes S_(s+1)."""
    names = Names()
    names.tiles("a b c d e f")
    data, pad = _reshape("a S1 b c S2 d e f S2 D", 2, names=names)
    assert show(pad) == "F T S2 F F S3 F F S1 F T S3 D"
    assert [s for _, _, s in data] == [0, 2, 0, 3, 0, 1, 0, 3]
    real = [x for x, (_, is_pad, _) in zip(data, pad) if not is_pad]
    assert show(real, names) == "a b c S3 d e S1 f D"
    assert [p.valid for (_, p, _), (_, is_pad, _) in zip(data, pad) if is_pad] == [0, 0]


def test_reshape_b1_2_20_example():
    data, _ = _reshape("a0 a1 S1 b0 b1 S1 c0 c1 S1 d0 d1 S2 D", 2, rank=1, pad=False)
    assert show(data) == "a0 a1 S1 b0 b1 S2 c0 c1 S1 d0 d1 S3 D"


def test_reshape_chunk_1_adds_a_size_1_dim():
    """Paper 3.3 Broadcast step: [T] -> [T, 1]."""
    data, _ = _reshape("x y z D", 1, pad=False)
    assert show(data) == "x S1 y S1 z S1 D"


def test_reshape_adds_no_cycles():
    data, _ = _reshape("a b c d D", 2, pad=False, t=[0, 3, 5, 8])
    assert times(data) == [1, 4, 6, 9]


def _promote(seq, shape, rank=None, t=None):
    outs, _ = run_operator("Promote", {"rank": rank}, {"in": paper(seq)},
                           info_in={"in": st(shape)}, times={"in": t} if t else None)
    return outs[0]


def test_promote_outermost_raises_only_the_last_stop():
    """Paper shape table / errata 1: Promote adds a new outermost dim; the last element's
    S_N becomes S_(N+1), every other stop is unchanged."""
    D0 = sympy.Symbol("D0")
    assert show(_promote("a b S1 c S1 D", (2, D0))) == "a b S1 c S2 D"
    assert show(_promote("a S1 b S2 c S1 d S2 D", (2, 2, D0))) == "a S1 b S2 c S1 d S3 D"


def test_promote_outermost_of_rank0_gives_S1_on_the_last_value():
    """Errata 1: a rank-0 input's last value gets S1."""
    assert show(_promote("a b c D", (3,))) == "a b c S1 D"
    assert show(_promote("a D", (1,))) == "a S1 D"


def test_promote_outermost_keeps_an_empty_stream_empty():
    """D_(a+1) = 1 if D_a > 0 else 0: an empty stream stays empty (no element, no stop)."""
    assert _promote("D", (sympy.Symbol("D0"),)) == []
    assert _promote("D", (sympy.Symbol("D0"), 4)) == []


def test_promote_rank0_adds_a_new_innermost_dim():
    """2.21 (p = 0): `a b S1 D` (1,2) -> `a S1 b S2 D` (1,2,1)."""
    assert show(_promote("a b S1 D", (1, 2), rank=0)) == "a S1 b S2 D"
    assert show(_promote("a b D", (2,), rank=0)) == "a S1 b S1 D"


def test_promote_at_rank_p_raises_stops_at_or_above_p():
    """2.21: a stop s stays s if s < p, else becomes s + 1 (p = 1: [2,3] -> [2,1,3])."""
    assert show(_promote("a b c S1 d e f S1 D", (2, 3), rank=1)) == \
        "a b c S2 d e f S2 D"
    assert show(_promote("a S1 b S2 c S1 d S2 D", (2, 2, 1), rank=2)) == \
        "a S1 b S3 c S1 d S3 D"


def test_promote_outermost_needs_a_lookahead():
    """The last stop can only be decided once the next element (or the close) is seen, so
    an element is not emitted before its successor is visible."""
    out = _promote("a b c D", (3,), t=[0, 10, 20])
    assert show(out) == "a b c S1 D"
    assert out[0][0] >= 10 and out[1][0] >= 20


def _expand(seq, attrs, ref=None, t_ref=None):
    inputs = {"in": paper(seq)}
    if ref is not None:
        inputs["ref"] = paper(ref)
    outs, _ = run_operator("Expand", attrs, inputs,
                           times={"ref": t_ref} if t_ref else None)
    return outs[0]


def test_expand_with_ref_2_22_example():
    """2.22 (e = 1): in `x S1 y S2` (1,2,1), ref `r r r S1 r r r S2` -> `x x x S1 y y y S2`."""
    out = _expand("x S1 y S2 D", {"rank": 0}, ref="r r r S1 r r r S2 D")
    assert show(out) == "x x x S1 y y y S2 D"


def test_expand_with_ref_paper_form_and_ragged_ref():
    """Paper form: in [2, 1], ref [2, D_ragged] (rank 1): each element fills its group."""
    out = _expand("x S1 y S1 D", {"rank": 0}, ref="r r S1 r r r S1 D")
    assert show(out) == "x x S1 y y y S1 D"


def test_expand_with_ref_two_repeated_dims():
    """rank b = 1: the two innermost size-1 dims are expanded ([2,1,1] -> [2,2,3])."""
    out = _expand("x S2 y S2 D", {"rank": 1},
                  ref="r r r S1 r r r S2 r r r S1 r r r S2 D")
    assert show(out) == "x x x S1 x x x S2 y y y S1 y y y S2 D"


def test_expand_static_sizes_keep_the_rank():
    """Errata 4: the static Expand replaces the trailing size-1 dims by static sizes."""
    assert show(_expand("x S1 y S1 D", {"sizes": [3]})) == "x x x S1 y y y S1 D"
    assert show(_expand("x S2 y S2 D", {"sizes": [2, 3]})) == \
        "x x x S1 x x x S2 y y y S1 y y y S2 D"
    # the input's own stop survives on its last copy
    assert show(_expand("x S1 y S2 D", {"sizes": [2]})) == "x x S1 y y S2 D"


def test_expand_holds_its_element_until_the_last_copy():
    """Like Repeat, Expand releases an input element only after its last copy is sent: the
    upstream credit returns one cycle after the reference's last element of the group (the
    interleaved attention's round-robin dealer cannot run ahead of the KV tiles)."""
    _, _, ins, _ = run_net("Expand", {"rank": 0}, {"in": paper("x S1 y S1 D"),
                                                   "ref": paper("r r r S1 r S1 D")},
                           times_in={"ref": [0, 5, 9, 12]})
    assert list(ins["in"].credits) == [9 + 1, 12 + 1]  # released at 9 and 12 (was 0, 9)


def test_expand_output_is_timed_by_the_reference():
    """2.22: 0 cycles; the output is timed by the ref's arrival."""
    out = _expand("x S1 D", {"rank": 0}, ref="r r r S1 D", t_ref=[0, 5, 9])
    assert times(out) == [1, 6, 10]


def test_repeat_2_23_example():
    outs, _ = run_operator("Repeat", {"count": 3}, {"in": paper("a b S1 D")})
    assert show(outs[0]) == "a a a S1 b b b S2 D"
    outs, _ = run_operator("Repeat", {"count": 2}, {"in": paper("a b D")})
    assert show(outs[0]) == "a a S1 b b S1 D"


@pytest.mark.parametrize("x", [0, 5])
def test_repeat_timing_without_back_pressure(x):
    """simulation-errata 4: input visible at x, copies visible at x+1, x+1, x+2, ...,
    x+y-1; the clock then advances by y and the input is released."""
    outs, logs, ins, ctx = run_net("Repeat", {"count": 8}, {"in": paper("a")},
                                   times_in={"in": [x]})
    assert times(outs[0]) == [x + 1, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7]
    assert ctx.t == x + 8
    assert list(ins["in"].credits) == [x + 8 + 1]  # dequeued at x + 8


def test_repeat_timing_under_back_pressure():
    """simulation-errata 4: depth-1 output whose consumer releases on arrival: copies
    visible at 1, 3, 5, 7, 10, 13, 17, 21; the input is released at 26."""
    outs, logs, ins, ctx = run_net("Repeat", {"count": 8}, {"in": paper("a")},
                                   out_caps={0: 1}, consumers={0: consumer()})
    assert [t for t, _, _ in logs[0]] == [1, 3, 5, 7, 10, 13, 17, 21]
    assert list(ins["in"].credits) == [26 + 1]


def test_repeat_second_element_follows_the_clock_advance():
    outs, _ = run_operator("Repeat", {"count": 2}, {"in": paper("a b D")})
    assert times(outs[0]) == [1, 1, 3, 3]


def test_zip_2_24_example():
    outs, _ = run_operator("Zip", {}, {"a": paper("a b S1 D"), "b": paper("p q S1 D")})
    assert show(outs[0]) == "(a,p) (b,q) S1 D"


def test_zip_mismatch_is_an_error():
    with pytest.raises(SimError, match="stop levels differ"):
        run_operator("Zip", {}, {"a": paper("a b S1 D"), "b": paper("p S1 q S1 D")})
    with pytest.raises(SimError, match="end at different"):
        run_operator("Zip", {}, {"a": paper("a b S1 D"), "b": paper("p q S1 r S1 D")})
