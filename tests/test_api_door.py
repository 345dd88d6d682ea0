"""The calls the command line makes through stepc.api work for scripts too: each refuses bad
input with an API error, never a library's exception."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

import stepc
from stepc.api.inputs import hardware_presets, weight_values
from stepc.app.editor import format_bytes
from stepc.app.files import DrawingError, check_drawing, heat

REPO = Path(__file__).resolve().parent.parent
SWIGLU = str(REPO / "programs" / "swiglu.step")


def test_format_bytes_lays_out_and_locates_a_syntax_error():
    text, new = format_bytes("mine.step", b"param  TB=16\n")
    assert text == "param  TB=16\n" and new == "param TB = 16\n"
    with pytest.raises(stepc.StepError) as e:
        format_bytes("bad.step", b"param TB = \n")
    assert str(e.value).startswith("bad.step:1:")  # rendered with the file's source


def test_weight_values_refuses_a_missing_file_as_an_input_error(tmp_path):
    with pytest.raises(stepc.InputError):
        weight_values(stepc.check(SWIGLU), str(tmp_path / "none.safetensors"))


def test_cost_render_shows_the_roofline_only_with_hardware():
    prog = stepc.load(SWIGLU)
    texts = []
    for cost in (prog.analyze(), prog.analyze(hw="paper-eval")):
        out = io.StringIO()
        cost.render(Console(file=out, width=100))
        texts.append(out.getvalue())
    assert "roofline" not in texts[0].lower() and "roofline" in texts[1].lower()


def test_drawings_and_presets():
    assert "paper-eval" in hardware_presets()
    with pytest.raises(DrawingError):
        check_drawing("graph.txt")  # no drawing format
    assert heat(0.5, "half").fraction == 0.5
