"""Hostile inputs around `stepc import` and `stepc export` (issue 41, item 13): never exit 70."""

from __future__ import annotations

from click.testing import CliRunner

from stepc.cli import main


def _invoke(*args: str):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps stderr apart already
        runner = CliRunner()
    return runner.invoke(main, list(args))


def test_a_store_into_a_tensor_of_2_31000_tiles_is_a_located_check_error(tmp_path):
    dims = ", ".join(["2147483648"] * 1000)
    prog = tmp_path / "huge.step"
    prog.write_text(f"tensor X : f32[64, 64] input\ntensor Y : f32[{dims}] output\n"
                    "LinearOffChipStore(LinearOffChipLoad(X, tile=[16, 64]), Y)\n")
    r = _invoke("check", str(prog))
    assert r.exit_code == 1 and "huge.step:3:" in r.output + r.stderr
    assert "(~2^30990 tiles of" in r.output + r.stderr  # (2^31)^1000 / (16 * 64)
