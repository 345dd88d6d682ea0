"""Benchmark: parse time of each bundled program, textX path vs the fast parser.

Prints, per programs/*.step, the median CPU time of the textX path and of the fast
recursive-descent parser (uncached: `parse()` also keeps recent trees), in the same run,
and their ratio; both give the same AST.

    python benchmarks/bench_parse.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from machine import machine_line

from stepc.grammar.descent import parse_fast
from stepc.grammar.parse import _parse_textx
from stepc.source import SourceFile

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"


def median_ms(fn, src: SourceFile, repeat: int) -> float:
    """Median CPU milliseconds of `fn(src)` over `repeat` runs."""
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn(src)
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    print(f"{'program':28} {'KB':>5} {'textX ms':>9} {'fast ms':>8} {'ratio':>6}")
    total_old = total_new = 0.0
    for path in sorted(PROGRAMS.glob("*.step")):
        src = SourceFile(path.name, path.read_text(encoding="utf-8"))
        assert parse_fast(src) == _parse_textx(src), path.name
        old = median_ms(_parse_textx, src, args.repeat)
        new = median_ms(parse_fast, src, args.repeat)
        total_old, total_new = total_old + old, total_new + new
        print(f"{path.name:28} {len(src.text) / 1024:5.1f} {old:9.2f} {new:8.2f} "
              f"{old / new:6.1f}")
    print(f"{'total':28} {'':5} {total_old:9.2f} {total_new:8.2f} {total_old / total_new:6.1f}")
    print(machine_line())


if __name__ == "__main__":
    main()
