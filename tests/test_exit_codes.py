"""Exit codes as the README's table gives them, for every command (issue 41, items 1, 2
and 5): Ctrl-C is 130 with one line everywhere, a missing input file is a usage error
whatever its kind, and advice followed leads somewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
SWIGLU = str(REPO / "programs" / "swiglu.step")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("command", [
    ["check"], ["analyze"], ["dot"], ["sim"], ["fifo"], ["export", "-o", "{tmp}/g.pb"],
    ["rewrite", "downtile", "--tile", "16x16", "-o", "{tmp}/r.step"]])
def test_ctrl_c_exits_130_with_one_line(command, tmp_path, monkeypatch):
    def interrupt(*a, **k):
        raise KeyboardInterrupt
    # stepc.api keeps the `check` it resolves lazily: patched first, it keeps (and the undo
    # restores) the real one, not the stand-in of stepc.api.program patched before it
    monkeypatch.setattr("stepc.api.check", interrupt)  # as the use cases name it
    monkeypatch.setattr("stepc.api.program.check", interrupt)
    args = [a.format(tmp=tmp_path) for a in command]
    res = run(*args[:1], *(args[1:2] if command[0] == "rewrite" else []), SWIGLU,
              *(args[2:] if command[0] == "rewrite" else args[1:]))
    assert res.exit_code == 130, res.output
    lines = res.output.strip().splitlines()
    assert lines == ["stepc: interrupted (Ctrl-C): nothing more was done"], res.output
    assert "Aborted" not in res.output


def test_ctrl_c_while_the_group_parses_its_options_exits_130(monkeypatch):
    """Before any command runs (click's own parsing would print "Aborted!" and exit 1)."""
    from stepc.cli.group import _Group

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(_Group.__mro__[1], "parse_args", interrupt)
    res = run("check", SWIGLU)
    assert res.exit_code == 130, res.output
    assert res.output.strip().splitlines() == \
        ["stepc: interrupted (Ctrl-C): nothing more was done"], res.output


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_a_real_sigint_during_a_simulation_exits_130(tmp_path):
    """The signal itself, sent to `stepc sim` once the simulation is under way (the child
    says so when the command calls it). The run is minutes of work by construction
    (SwiGLU over 65,536 rows, one per tile, with values), so the signal always finds it
    running, however fast the machine."""
    started = ("import stepc.app.sim as s, stepc.cli.group as g\n"
               "simulate = s.simulate\n"
               "def announced(*a, **k):\n"
               "    print('simulating', flush=True)\n"
               "    return simulate(*a, **k)\n"
               "s.simulate = announced\n"
               "g.run()\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", started, "sim", SWIGLU, "-D", "B=65536", "-D", "TB=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stdout is not None and proc.stdout.readline() == "simulating\n"
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("stepc: interrupted (Ctrl-C)"), err
    assert "Traceback" not in err and "Aborted" not in err


def test_sweep_out_on_a_directory_says_so_first(tmp_path):
    """The advice to add --resume led to "is a directory": that comes first now."""
    res = run("sweep", SWIGLU, "--grid", "TB=16", "--out", str(tmp_path))
    assert res.exit_code == 2
    assert "is a directory" in res.output and "--resume" not in res.output, res.output


def test_help_names_the_interrupt_code():
    assert "130 interrupted" in run("--help").output


@pytest.mark.parametrize("args", [["check", "nope.pb"], ["analyze", "nope.pb"],
                                  ["sim", "nope.pb"], ["import", "nope.pb"]])
def test_a_missing_graph_file_is_a_usage_error(args, tmp_path, monkeypatch):
    pytest.importorskip("google.protobuf")
    monkeypatch.chdir(tmp_path)
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert "nope.pb: cannot read" in res.output


def test_a_graph_file_that_is_not_a_graph_is_a_program_error(tmp_path):
    pytest.importorskip("google.protobuf")
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\xff\xff\xff\xff not a graph")
    for command in ("check", "import"):
        res = run(command, str(bad))
        assert res.exit_code == 1, res.output


@pytest.fixture(scope="module")
def swiglu_sweep(tmp_path_factory):
    """The README's SwiGLU sweep, on a smaller grid (TB and TI of 16 and 32)."""
    out = tmp_path_factory.mktemp("sweep") / "results.jsonl"
    res = run("sweep", SWIGLU, "--grid", "TB=16,32", "--grid", "TI=16,32", "--hw",
              "hdl-validation", "--timing-only", "-j", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    return out


def _help_examples(command: str) -> list[list[str]]:
    """The `stepc COMMAND` lines of a command's help."""
    text = run(command, "--help").output
    return [line.split()[1:] for line in text.splitlines()
            if line.strip().startswith(f"stepc {command} ")]


def test_every_plot_help_example_runs_on_the_readmes_sweep(swiglu_sweep, tmp_path):
    pytest.importorskip("matplotlib")
    examples = _help_examples("plot")
    assert len(examples) == 2
    for i, args in enumerate(examples):
        args = [str(swiglu_sweep) if a == "results.jsonl" else a for a in args]
        at = args.index("-o") + 1
        args[at] = str(tmp_path / f"{i}_{args[at]}")
        res = run(*args)
        assert res.exit_code == 0, (args, res.output)
        assert os.path.getsize(args[at]) > 1000


@pytest.mark.parametrize(("args", "said"), [
    (["-o", "x.jpg"], "unknown format"),
    (["--x", "on_chip", "-o", "x.png"], "did you mean `on_chip_bytes`?"),
    (["--bar", "cycle", "-o", "x.png"], "did you mean `cycles`?"),
])
def test_plot_mistakes_are_usage_errors(swiglu_sweep, tmp_path, monkeypatch, args, said):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    res = run("plot", str(swiglu_sweep), *args)
    assert res.exit_code == 2, res.output
    assert said in res.output, res.output


def test_plot_of_results_without_a_finished_point_is_refused(tmp_path):
    pytest.importorskip("matplotlib")
    empty = tmp_path / "r.jsonl"
    empty.write_text("")
    res = run("plot", str(empty), "-o", str(tmp_path / "p.png"))
    assert res.exit_code == 2, res.output
    assert not (tmp_path / "p.png").exists()


def test_plot_without_matplotlib_is_a_usage_error(swiglu_sweep, tmp_path, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_matplotlib(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    res = run("plot", str(swiglu_sweep), "-o", str(tmp_path / "p.png"))
    assert res.exit_code == 2, res.output
    assert "pip install 'stepc[plot]'" in res.output


def test_no_help_loads_sympy():
    """`stepc --help` and every `stepc COMMAND --help` load neither sympy nor the checker
    (they were slower than `stepc check swiglu`)."""
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom stepc.cli import main\n"
        "names = main.list_commands(None)\n"
        "for args in [['--help']] + [[n, '--help'] for n in names]:\n"
        "    r = CliRunner().invoke(main, args)\n"
        "    assert r.exit_code == 0, (args, r.output)\n"
        "    assert 'sympy' not in sys.modules, args\n"
        "print(len(names))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 17


@pytest.mark.parametrize("args", [["--hw", "/dev/zero"], ["--set", "dram.part=/dev/zero"]])
def test_a_device_as_a_hardware_file_is_refused_unread(args):
    res = run("sim", SWIGLU, *args)
    assert res.exit_code == 2 and "/dev/zero: not a regular file" in res.output, res.output


@pytest.mark.parametrize("text", ["", "tensor X : bf16[64, 256] input\n", "param N = 4\n"])
def test_a_program_without_operators_warns_in_check_and_sim(text, tmp_path):
    path = tmp_path / "p.step"
    path.write_text(text, encoding="utf-8")
    for command in ("check", "sim"):
        res = run(command, str(path))
        assert res.exit_code == 0 and "warning[W0003]" in res.output, res.output
    assert run("check", "--werror", str(path)).exit_code == 1


def test_fmt_of_a_folder_without_programs_says_so(tmp_path):
    res = run("fmt", "--check", str(tmp_path))
    assert res.exit_code == 0
    assert f"{tmp_path} holds no .step file: nothing to format" in res.output


@pytest.mark.parametrize("text", ["", "[hbm]\n", 'name = "mine"\n'])
def test_a_hardware_file_that_sets_nothing_says_so(text, tmp_path):
    from dataclasses import asdict, replace

    from stepc.hw.config import DEFAULT_PRESET, load_config
    hw = tmp_path / "hw.toml"
    hw.write_text(text, encoding="utf-8")
    res = run("sim", SWIGLU, "--hw", str(hw), "--timing-only")
    assert res.exit_code == 0
    assert "sets no key of [fabric], [hbm] or [dram]: every value is the default" in res.output
    # what the warning claims: the defaults are the default preset's values
    mine, preset = load_config(str(hw)), load_config(DEFAULT_PRESET)
    assert asdict(replace(mine, name="", description="")) == \
        asdict(replace(preset, name="", description=""))
    hw.write_text("[hbm]\nchannels = 16\n", encoding="utf-8")
    assert "sets no key" not in run("sim", SWIGLU, "--hw", str(hw), "--timing-only").output


def test_tune_says_screened_as_its_report_does(tmp_path):
    res = run("tune", SWIGLU, "--space", "TB=16,32", "--out", str(tmp_path / "t"))
    assert res.exit_code == 0, res.output
    assert "simulated with the fluid model" in res.output and " screened\n" not in res.output


def test_sampler_optuna_without_optuna_says_that_was_asked(tmp_path, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_optuna(name, *a, **k):
        if name == "optuna":
            raise ImportError(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_optuna)
    res = run("tune", SWIGLU, "--space", "TB=16,32", "--sampler", "optuna", "--out",
              str(tmp_path / "t"))
    assert res.exit_code == 2, res.output
    assert "--sampler optuna: the sampler needs Optuna" in res.output
    assert "too large" not in res.output


def _every_help_example() -> list[tuple[str, list[str]]]:
    """(command, arguments) of each `stepc ...` example line in every command's help
    (a continued line joined with the next)."""
    from stepc.cli.group import _ELSEWHERE
    found = []
    for name in sorted(_ELSEWHERE):
        text = run(name, "--help").output.replace("\\\n", " ")
        for line in text.splitlines():
            words = line.split()
            if len(words) > 1 and words[0] == "stepc" and words[1] == name.split()[0]:
                found.append((name, words[1:]))
    return found


def test_every_help_example_parses():
    """Each example in a command's help names that command's real options and arguments
    (click parses it as it would before running; the plot examples also run, above)."""
    import click

    from stepc.cli.group import _Commands

    examples = _every_help_example()
    assert len(examples) >= 20
    commands = _Commands(main.commands)
    for name, args in examples:
        command = commands[name]
        try:
            command.make_context(name, list(args[1:]), parent=click.Context(main))
        except click.exceptions.Exit:
            pass
        except click.UsageError as e:
            pytest.fail(f"stepc {' '.join(args)}: {e.format_message()}")


# ------------------------------------------------------------------ imports (issue 41, item 12)
def _importer(tmp_path, target: str) -> str:
    prog = tmp_path / "a.step"
    prog.write_text(f'param N = 4\nimport "{target}"\n', encoding="utf-8")
    return str(prog)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="devices and FIFOs")
@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "too large", "missing"])
def test_an_import_stepc_cannot_read_is_refused_at_the_import(kind, tmp_path, monkeypatch):
    """Every import goes through the program-file rule: read only a regular file of at most
    MAX_SOURCE_BYTES, else a usage error located at the import (a device was read forever,
    a FIFO waited forever)."""
    import stepc.source
    target = {"device": "/dev/zero", "fifo": "pipe.step", "directory": "lib",
              "too large": "big.step", "missing": "none.step"}[kind]
    os.mkfifo(tmp_path / "pipe.step")
    (tmp_path / "lib").mkdir()
    (tmp_path / "big.step").write_text("param M = 1\n" * 10, encoding="utf-8")
    monkeypatch.setattr(stepc.source, "MAX_SOURCE_BYTES", 100)
    for command in ("check", "analyze", "dot"):
        res = run(command, _importer(tmp_path, target))
        assert res.exit_code == 2, (command, res.output)
        assert "a.step:2:1: error[E0002]: " in res.output and "Traceback" not in res.output
    said = {"device": "/dev/zero is not a regular file", "fifo": "is not a regular file",
            "directory": "is a directory", "too large": "is larger than 100 bytes",
            "missing": "no such file"}[kind]
    assert said in res.output, res.output


def test_an_import_that_is_not_utf8_names_the_byte_and_the_import(tmp_path):
    (tmp_path / "lib.step").write_bytes(b"param M = 1\nparam \xe9 = 2\n")
    res = run("check", _importer(tmp_path, "lib.step"))
    assert res.exit_code == 2, res.output
    assert "lib.step:2:7: error[E0003]: file is not valid UTF-8 (byte 0xe9)" in res.output
    assert "a.step:2:1: note: " in res.output, res.output


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="a device file")
def test_a_program_file_that_is_a_device_is_refused_unread():
    res = run("check", "/dev/zero")
    assert res.exit_code == 2, res.output
    assert "/dev/zero is not a regular file" in res.output
