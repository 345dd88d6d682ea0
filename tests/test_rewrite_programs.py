"""downtile on programs nobody wrote for it: every bundled program (at small sizes) and
generated matrix-product chains. Each rewrite must check, compute what the original
computes (simulated on the same random inputs) and move its analysis only by the rules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stepc
from stepc.api.rewrite import rewrite

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bundled import PROGRAMS, SMALL, program_params  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# smaller still for the MoE programs (4 experts, 64-wide), which are rewritten and compiled
# twice per test; the full sizes are slow
MOE = {"B": 8, "D": 64, "F": 64, "E": 4, "K": 2, "TILE_F": 32}
SIZES = {**SMALL, "swiglu": {"B": 32, "H": 64, "I": 64, "TB": 16, "TI": 32},
         "moe_static": MOE, "moe_dynamic": MOE, "moe_timemux": {**MOE, "R": 2},
         "moe_timemux_dynamic": {**MOE, "R": 2}}


@pytest.mark.parametrize("name", program_params(PROGRAMS))
def test_every_bundled_program_downtiles(name):
    done = rewrite(REPO / "programs" / f"{name}.step", "downtile", tile=(16, 16),
                   **SIZES.get(name, {}))
    assert not [d for d in done.program.diagnostics if d.severity.value == "error"]
    verdict = done.verify("paper-eval", seed=1)
    assert verdict.ok, verdict.problems
    assert all(c.action in ("rewritten", "kept", "converted") and c.detail
               for c in done.changes)


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_every_bundled_program_downtiles_at_its_own_size(name):
    """At the bundled sizes (a decoder layer: ~1.5 min under load): the rewrite checks and
    its analysis moves only by the rules (simulating both would take minutes)."""
    done = rewrite(REPO / "programs" / f"{name}.step", "downtile", tile=(16, 16))
    verdict = done.verify("paper-eval", simulate=False)
    assert verdict.ok, verdict.problems


@pytest.mark.slow
def test_swiglu_at_full_size():
    done = rewrite(REPO / "programs" / "swiglu.step", "downtile", tile=(16, 16))
    verdict = done.verify("hdl-validation")
    assert verdict.ok, verdict.problems
    assert len(done.rewritten) == 11


def chain(m: int, k: int, n: int, steps: int, parts: int, transpose: bool, accum: bool) -> str:
    """A generated program: `steps` row tiles of A [m, k] times B ([k, n], or [n, k] with
    `transpose`), as a Map or, with `accum`, an Accum over `parts` slices of k; then silu,
    a product with itself and a store."""
    kp = k * parts if accum else k
    b_shape = f"[{n}, {kp}]" if transpose else f"[{kp}, {n}]"
    b_tile = f"[{n}, {k}]" if transpose else f"[{k}, {n}]"
    if accum:
        a_load = f"LinearOffChipLoad(A, tile=[{m}, {k}], shape=[{steps}, {parts}])"
        b_stride = "[0, 1]" if transpose else "[0, 1]"
        b_load = f"LinearOffChipLoad(B, tile={b_tile}, stride={b_stride}, " \
                 f"shape=[{steps}, {parts}])"
        op = "Accum(a, b, fn={fn}, rank=1)"
    else:
        a_load = f"LinearOffChipLoad(A, tile=[{m}, {k}], shape=[{steps}])"
        b_load = f"LinearOffChipLoad(B, tile={b_tile}, stride=[0], shape=[{steps}])"
        op = "Map(a, b, fn={fn})"
    fn = "matmul(transpose=true)" if transpose else "matmul"
    return (f"tensor A : f32[{m * steps}, {kp}] input\n"
            f"tensor B : f32{b_shape} weight\n"
            f"tensor Y : f32[{m * steps}, {n}] output\n"
            f"a = {a_load}\nb = {b_load}\n"
            f"c = {op.format(fn=fn)}\n"
            "s = Map(c, fn=silu)\np = Map(s, c, fn=mul)\nLinearOffChipStore(p, Y)\n")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.sampled_from([8, 16, 32]), k=st.sampled_from([16, 32, 48]),
       n=st.sampled_from([16, 32]), steps=st.integers(1, 3), parts=st.integers(1, 3),
       transpose=st.booleans(), accum=st.booleans())
def test_generated_products_downtile(m, k, n, steps, parts, transpose, accum):
    text = chain(m, k, n, steps, parts, transpose, accum)
    original = stepc.compile(text, "gen.step")
    done = rewrite(original, "downtile", tile=(16, 16))
    verdict = done.verify("paper-eval", seed=steps)
    assert verdict.ok, (text, verdict.problems)
    split_k = k // 16 if k > 16 else 1
    reduced = parts if accum else 1
    rewritten = max(m, k, n) > 16  # some tile is larger than the physical tile
    assert verdict.totals["flops"][2] == rewritten * steps * m * n * split_k * reduced


def test_a_dynamically_tiled_moe_is_downtiled_where_it_can_be():
    """moe_dynamic packs each expert's tokens into one tile of a dynamic row count: its
    up and gate products are split by columns and along the inner dim (rows kept whole,
    the token tile repeated once per output sub-tile column, then split); the element-wise
    maps follow; the down projection, which would re-read its dynamic left operand over
    the reduced dim, keeps its tiles with the reason."""
    done = rewrite(REPO / "programs" / "moe_dynamic.step", "downtile", tile=(16, 16),
                   **SIZES["moe_dynamic"])
    by_node = {c.node: c for c in done.changes}
    up, act, down = (by_node[f"moe.ffn[0].{n}"] for n in ("up", "act", "down"))
    assert up.action == "rewritten" and "rows kept whole" in up.detail
    assert act.action == "rewritten"
    part = done.program.streams["moe_ffn_0_up_part"]
    assert part.type.startswith("Strm<Tile<f32, [") and ", 16]>" in part.type
    assert down.action == "kept" and "Bufferize takes only static tiles" in down.detail
    # simulated equal by test_every_bundled_program_downtiles


def test_padded_tiles_keep_their_rows_whole():
    """moe_simple pads each expert's rows into [4, 64] tiles whose valid-row count the
    final retile_streamify(filter=true) reads: the products are split by columns only
    ([4, 16] sub-tiles, each keeping the count), and the values are the same."""
    done = rewrite(REPO / "programs" / "moe_simple.step", "downtile", tile=(16, 16))
    products = [c for c in done.rewritten if c.node.startswith("y[")]
    assert len(products) == 2 and all("1 x 4 output sub-tiles" in c.detail for c in products)
    assert done.program.streams["y_0_part"].type.startswith("Strm<Tile<bf16, [4, 16]>")
    verdict = done.verify("paper-eval", seed=4)
    assert verdict.ok, verdict.problems
