"""What the commands do with input they cannot use (issue 29, items 2, 3, 7, 13, 21): one
rule for output paths, results files that are not results, non-finite numbers, a missing
program, the internal-error message and what a sweep says about its file. Each case here
exited 70, ran to the end before refusing, or said something untrue before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import stepc.cli.group
from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
SWIGLU = str(REPO / "programs" / "swiglu.step")
MOE = str(REPO / "programs" / "moe_simple.step")
ROOT_WRITES_ANYWHERE = hasattr(os, "geteuid") and os.geteuid() == 0


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def place(tmp_path):
    """A directory with a plain file (`afile`), a read-only directory and bad results
    files: binary, foreign JSON lines, and an empty one."""
    (tmp_path / "afile").write_text("x")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    (tmp_path / "bin.jsonl").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "latin1.jsonl").write_bytes(b'{"key": "\xe9"}\n')
    (tmp_path / "foreign.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "notjson.jsonl").write_text("hello\nworld\n")
    yield tmp_path
    ro.chmod(0o755)


# every command that writes, and how it names its output; `{}` is the output path
WRITERS = {
    "sweep --out": ["sweep", SWIGLU, "--grid", "TB=16", "-j", "1", "--out", "{}"],
    "plot -o": ["plot", "{results}", "-o", "{}"],
    "tune --out": ["tune", SWIGLU, "--space", "TB=16,32", "-j", "1", "--out", "{}"],
    "reproduce --out": ["reproduce", "9", "-j", "1", "--out", "{}"],
    "sim --out": ["sim", MOE, "--out", "{}"],
    "sim --trace-out": ["sim", MOE, "--trace-out", "{}"],
    "dot -o": ["dot", MOE, "-o", "{}"],
}
BAD_PLACES = {
    "missing-directory": ("nodir/out", "does not exist"),
    "below-a-file": ("afile/out", "is a file, not a directory"),
    "read-only": ("ro/out", "permission denied"),
}


@pytest.mark.parametrize("where", BAD_PLACES)
@pytest.mark.parametrize("writer", WRITERS)
def test_output_paths_follow_one_rule(place, writer, where, monkeypatch):
    """Checked before any work (nothing simulated: each answers in well under a run's
    time), a usage error (exit 2) naming the flag, and nothing created."""
    if where == "read-only" and ROOT_WRITES_ANYWHERE:
        pytest.skip("root writes in read-only directories")
    results = place / "ok.jsonl"
    results.write_text("")
    target, message = BAD_PLACES[where]
    path = str(place / target)
    calls = []
    monkeypatch.setattr("stepc.sim.run.simulate", lambda *a, **k: calls.append(a))
    args = [a.replace("{}", path).replace("{results}", str(results)) for a in WRITERS[writer]]
    res = run(*args)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert message in res.output and writer.split()[1] in res.output, res.output
    assert not calls
    assert not (place / "nodir").exists()


def test_sim_out_directory_itself_may_be_new(tmp_path):
    """Only the last component of an output directory is created."""
    res = run("sim", MOE, "--out", str(tmp_path / "tensors"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "tensors" / "Y.npy").exists()


@pytest.mark.parametrize("name,reason", [
    ("bin.jsonl", "binary data"), ("latin1.jsonl", "not UTF-8"),
    ("foreign.jsonl", ":1: not a results file: the line is not a stepc sweep record"),
    ("notjson.jsonl", ":1: not a results file: the line is not JSON"),
])
@pytest.mark.parametrize("command", ["sweep --resume", "plot", "tune --resume"])
def test_results_files_that_are_not_results_are_refused(place, name, reason, command):
    """Exit 2 with the reason, before anything runs, and the file left as it was."""
    path = place / name
    before = path.read_bytes()
    if command == "plot":
        args = ["plot", str(path), "-o", str(place / "p.png")]
    elif command == "sweep --resume":
        args = ["sweep", SWIGLU, "--grid", "TB=16", "-j", "1", "--out", str(path), "--resume"]
    else:
        tune_dir = place / "tune"
        tune_dir.mkdir(exist_ok=True)
        (tune_dir / "results.jsonl").write_bytes(before)
        path = tune_dir / "results.jsonl"
        args = ["tune", SWIGLU, "--space", "TB=16,32", "-j", "1", "--out", str(tune_dir),
                "--resume"]
    res = run(*args)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert reason in res.output, res.output
    assert path.read_bytes() == before
    assert not (place / "p.png").exists()


def test_a_torn_last_line_is_still_a_results_file(tmp_path):
    from stepc.explore.runner import read_results
    rec = {"key": "k", "program": "p.step", "params": {}, "status": "ok"}
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps(rec)[:20])
    assert read_results(str(path)) == [rec]
    path.write_text(json.dumps(rec))  # no newline after a whole record: kept
    assert read_results(str(path)) == [rec]


def test_internal_error_names_the_debug_flag(monkeypatch, capsys):
    """Exit 70 says what broke and how to get the traceback for a report."""
    def broken(**kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr(stepc.cli.group, "main", broken)
    monkeypatch.setattr("sys.argv", ["stepc", "check", "x.step"])
    with pytest.raises(SystemExit) as e:
        stepc.cli.run()
    assert e.value.code == 70
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and "stepc --debug" in err, err


@pytest.mark.parametrize("margin", ["nan", "inf", "-0.1"])
def test_tune_margin_must_be_finite(tmp_path, margin):
    res = run("tune", SWIGLU, "--space", "TB=16,32", "--margin", margin, "--out",
              str(tmp_path / "t"))
    assert res.exit_code == 2 and "--margin" in res.output, res.output


def test_werror_summary_says_the_warnings_count(tmp_path):
    prog = tmp_path / "w.step"
    prog.write_text("param N = 4\nparam UNUSED = 3\ntensor X : bf16[4, 64] input\n"
                    "x = LinearOffChipLoad(X, tile=[1, 64])\nSink(x)\n")
    plain = run("check", str(prog))
    if "warning[" not in plain.output:
        pytest.skip("this program has no warning to promote")
    res = run("check", "--werror", str(prog))
    assert res.exit_code == 1
    assert "(--werror: warnings count as errors)" in res.output, res.output
    assert "--werror" not in plain.output and plain.exit_code == 0


@pytest.mark.parametrize("command", ["check", "sim", "analyze", "dot", "fmt", "sweep", "tune"])
def test_a_missing_program_is_a_usage_error_everywhere(command, tmp_path):
    """check and sim exited 1, fmt 2: now every command says 2 (a path given to it)."""
    extra = {"sweep": ["--out", str(tmp_path / "r.jsonl")],
             "tune": ["--space", "TB=16", "--out", str(tmp_path / "t")]}.get(command, [])
    res = run(command, "no/such/program.step", *extra)
    assert res.exit_code == 2, (command, res.exit_code, res.output)
    assert "no/such/program.step" in res.output


def test_sweep_says_where_it_wrote(tmp_path, monkeypatch):
    """And a resume with nothing to run starts no worker pool (it took 7.2 s)."""
    out = tmp_path / "r.jsonl"
    res = run("sweep", SWIGLU, "--grid", "TB=16", "-j", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert f"wrote 1 record to {out}" in res.output
    monkeypatch.setattr("stepc.explore.runner.LocalPool",
                        lambda *a, **k: pytest.fail("a pool for nothing"))
    again = run("sweep", SWIGLU, "--grid", "TB=16", "-j", "1", "--out", str(out), "--resume")
    assert again.exit_code == 0 and f"nothing to run: every point's record is in {out}" in \
        again.output, again.output


def test_sweep_refuses_an_existing_out_before_compiling(tmp_path, monkeypatch):
    out = tmp_path / "r.jsonl"
    out.write_text("")
    monkeypatch.setattr("stepc.api.program.check", lambda *a, **k: pytest.fail("compiled"))
    res = run("sweep", SWIGLU, "--grid", "TB=16", "--out", str(out))
    assert res.exit_code == 2 and "exists: add --resume" in res.output, res.output


def test_sweep_interrupted_before_the_first_point_says_so(tmp_path, monkeypatch):
    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr("stepc.api.plan_sweep", interrupt)
    out = tmp_path / "r.jsonl"
    res = run("sweep", SWIGLU, "--grid", "TB=16", "--out", str(out))
    assert res.exit_code == 130
    assert f"interrupted before any point finished: nothing was written to {out}" in \
        res.output, res.output


def test_plot_reports_on_stderr(tmp_path):
    out = tmp_path / "r.jsonl"
    assert run("sweep", SWIGLU, "--grid", "TB=16", "-j", "1", "--out", str(out)).exit_code == 0
    res = CliRunner().invoke(main, ["plot", str(out), "-o", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    assert "wrote" not in res.stdout and "wrote" in res.stderr


def test_sweep_refuses_an_absurd_worker_count(tmp_path):
    """Found by this issue's fuzz: `-j 99999999999` hung forking workers."""
    res = run("sweep", MOE, "--grid", "E=2", "-j", "99999999999", "--out",
              str(tmp_path / "r.jsonl"))
    assert res.exit_code == 2 and "-j" in res.output, res.output
