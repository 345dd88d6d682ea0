"""The walk over transformers' model library (tests/torch_walk.py): no MLP, norm, MoE,
attention or decoder-layer class that builds from a small config ends `stepc from-torch` in
an internal error; the counts per kind and outcome are printed (`-s` shows them). About half
an hour on two cores: in the slow set."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("transformers")

from torch_walk import INTERNAL, walk  # noqa: E402


@pytest.mark.slow
def test_no_transformers_block_is_an_internal_error():
    import transformers
    counts: Counter = Counter()
    internal = []
    for case, code, text in walk():
        counts[(case.kind, code)] += 1
        if code == INTERNAL:
            internal.append(f"{case.target}: {text.strip().splitlines()[-1][:300]}")
    print(f"\ntransformers {transformers.__version__}: exit codes per kind")
    for (kind, code), n in sorted(counts.items()):
        print(f"  {kind:10s} exit {code:3d}: {n}")
    assert sum(counts.values()) > 500, counts  # the walk found the library
    assert not internal, "\n".join(internal)
