"""The agent task suite (`stepc tasks`): every reference solution passes and every
known-wrong one fails the way its task says, each guardrail refuses what it should, the
knobs (seed, time limit) move the result, and the command line keeps its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stepc.api import InputError
from stepc.app.tasks import check_task, show_task, task
from stepc.cli import main
from stepc.tasks import TaskError, records, task_names
from stepc.tasks.checker import CYCLE_FACTOR, draw
from stepc.tasks.references import REFERENCES, draw_tensor, rotate_half_matrix

TOML_HEAD = 'title = "t"\nfamily = "f"\npreset = "paper-eval"\nreference = "gemm"\n'

SOLUTIONS = [(name, "solution.step", "pass", "") for name in task_names()] + [
    (name, w.file, w.fails, w.says) for name in task_names() for w in task(name).wrong]


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def candidate(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.step"
    path.write_text(text)
    return path


def edited(name: str, old: str, new: str) -> str:
    """The task's reference solution with `old` replaced by `new` (which must be there)."""
    text = task(name).solution.read_text()
    assert old in text, old
    return text.replace(old, new)


def test_the_library_has_the_families_of_published_agent_work():
    assert len(task_names()) >= 11
    families = {task(n).family for n in task_names()}
    assert {"gemm", "bmm", "mlp", "norm", "softmax", "rope", "moe", "attention"} <= families
    assert sum(task(n).family == "gemm" for n in task_names()) == 3


def test_the_docs_list_every_task():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "agents.md").read_text()
    section = doc[doc.index("### The tasks"):]
    listed = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert sorted(listed) == task_names()


@pytest.mark.parametrize("body,says", [
    ('title = "t"\n', "malformed task.toml"),
    (TOML_HEAD.replace("paper-eval", "paper-evil") + '[[tensor]]\nname = "Y"\n'
     'dtype = "f32"\nshape = [4]\nrole = "output"\n', "preset 'paper-evil'"),
    (TOML_HEAD + '[[tensor]]\nname = "X"\ndtype = "f32"\nshape = [4]\nrole = "scratch"\n',
     "role 'scratch'"),
    (TOML_HEAD + '[[tensor]]\nname = "Y"\ndtype = "bf16"\nshape = [4]\nrole = "output"\n',
     "has no tolerance"),
    (TOML_HEAD + '[[tensor]]\nname = "Y"\ndtype = "f32"\nshape = [4]\nrole = "output"\n'
     '[[external]]\nname = "s"\nkind = "zipf"\nrows = 4\n', "kind 'zipf'"),
])
def test_malformed_task_records_are_refused(tmp_path, monkeypatch, body, says):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "task.toml").write_text(body)
    monkeypatch.setattr(records, "LIBRARY", tmp_path)
    records.load_task.cache_clear()
    try:
        with pytest.raises(TaskError, match=says):
            records.load_task("broken")
    finally:
        records.load_task.cache_clear()


@pytest.mark.parametrize("name", task_names())
def test_every_task_is_whole(name):
    """A statement, a reference function, a solution, at least one wrong one, and no
    solution file in the folder that the record does not name."""
    t = task(name)
    assert t.statement.startswith("# ") and t.reference in REFERENCES
    assert t.wrong
    named = {"solution.step", *(w.file for w in t.wrong)}
    assert {p.name for p in t.folder.glob("*.step")} == named


@pytest.mark.parametrize("name,file,expect,says", SOLUTIONS)
def test_solutions_pass_and_known_wrong_ones_fail(name, file, expect, says):
    """The library's cases, among them the cheats that passed before the resource budget,
    the knob rule and the wide rows (lanes, whole-matrix tiles, switch_cycles=0, a softmax
    without its maximum): each must fail as its record says, naming what it records."""
    result = check_task(name, task(name).folder / file, seed=11)
    if expect == "pass":
        assert result.passed, result.reason
        assert result.reward == 1.0  # the reference solution against itself
        assert result.candidate.cycles == result.reference.cycles > 0
        assert result.candidate.on_chip_bytes > 0 and result.candidate.off_chip_bytes > 0
        assert result.candidate.resources == result.reference.resources
        assert result.candidate.resources["on_chip_bytes"] == result.candidate.on_chip_bytes
        return
    assert not result.passed and result.reward == 0.0
    assert says in result.reason, result.reason
    if expect == "rejected":
        assert result.stage == "guardrail" and result.candidate is None, result.reason
    else:
        assert result.stage == "compare", result.reason
        assert "differs from the reference" in result.reason or "non-finite" in result.reason


@pytest.mark.parametrize("name", ["moe_topk_static", "moe_topk_dynamic"])
def test_moe_solutions_pass_when_an_expert_gets_no_token(name):
    """Seed 72 routes the 8 tokens to 3 of the 4 experts: the idle expert's pipeline runs
    on an empty stream (no padding tile, no dynamic tile)."""
    _, streams = draw(task(name), 72)
    assert len(set(streams["routing"].ravel())) == 3
    assert check_task(name, task(name).solution, seed=72).passed


# ------------------------------------------------------------------ guardrails
GEMM = "gemm_ktiled"
DECLARED_A = "tensor A : f32[M, K] input = random(seed=1)"


@pytest.mark.parametrize("old,new,says", [
    # a precomputed value read from a file, into a tensor of the interface
    (DECLARED_A, 'tensor A : f32[M, K] input = file(path="a.npy")', "reads a file"),
    # another input of its own
    (DECLARED_A, DECLARED_A + "\ntensor A2 : f32[M, K] input = random(seed=3)",
     "not part of the task's interface"),
    # an output declared as an input
    ("tensor C : f32[M, N] output", "tensor C : f32[M, N] output\n"
     "tensor C2 : f32[M, N] output", "not part of the task's interface"),
])
def test_guardrails_refuse_other_inputs_and_files(tmp_path, old, new, says):
    result = check_task(GEMM, candidate(tmp_path, "c", edited(GEMM, old, new)), seed=1)
    assert result.stage == "guardrail" and not result.passed, result.reason
    assert says in result.reason and "c.step:" in result.reason  # located


@pytest.mark.parametrize("old,new,fixed", [
    ("param R = 32", "param R = 16", "tensor X : f32[32, 256] input (wide_rows)"),  # smaller
    ("f32[R, N]", "bf16[R, N]", "tensor X : f32[32, 256] input (wide_rows)"),  # a dtype
])
def test_guardrails_refuse_shapes_and_dtypes_the_task_does_not_fix(tmp_path, old, new, fixed):
    text = edited("softmax", old, new)
    result = check_task("softmax", candidate(tmp_path, "c", text), seed=1)
    assert result.stage == "guardrail" and f"the task fixes `{fixed}`" in result.reason


def test_a_missing_interface_tensor_is_refused(tmp_path):
    text = edited("rmsnorm", "tensor G : f32[1, H] weight = random(seed=2)",
                  "tensor GAIN : f32[1, H] weight = random(seed=2)").replace("(G,", "(GAIN,")
    result = check_task("rmsnorm", candidate(tmp_path, "c", text), seed=1)
    assert result.stage == "guardrail" and "does not declare the task's tensor G" in \
        result.reason


def test_constant_tensors_outside_the_interface_are_allowed():
    """decode_attention's solution numbers its slots with `IDX = arange`."""
    assert "tensor IDX : u64[B]            input = arange" in \
        task("decode_attention").solution.read_text()
    assert check_task("decode_attention", task("decode_attention").solution, seed=2).passed


def test_streams_other_than_the_tasks_and_stream_files_are_refused(tmp_path):
    name = "moe_topk_dynamic"
    route = 'stream merge : Strm<MultiHot<E>, 0>[B]    = external("routing", topk=K)'
    other = edited(name, route, route.replace('"routing"', '"merge_order"'))
    result = check_task(name, candidate(tmp_path, "other", other), seed=1)
    assert result.stage == "guardrail" and "`merge_order` is not one of the task's" in \
        result.reason
    from_file = edited(name, route, route.replace("topk=K", 'file="ids.npy"'))
    result = check_task(name, candidate(tmp_path, "file", from_file), seed=1)
    assert result.stage == "guardrail" and "reads a file" in result.reason


def test_a_program_that_does_not_compile_fails_with_its_location(tmp_path):
    text = edited("softmax", "fn=row_max", "fn=row_maxx")
    result = check_task("softmax", candidate(tmp_path, "typo", text), seed=1)
    assert result.stage == "compile" and not result.passed
    assert "typo.step:" in result.reason and "row_maxx" in result.reason


def test_a_candidate_far_slower_than_the_reference_fails(tmp_path):
    """Compute at 1 FLOP per cycle: 2 M cycles, over CYCLE_FACTOR x the reference's."""
    text = edited(GEMM, "fn=matmul, rank=1)", "fn=matmul, rank=1, compute_bw=1)")
    result = check_task(GEMM, candidate(tmp_path, "slow", text), seed=1)
    assert result.stage == "run" and not result.passed
    assert f"{CYCLE_FACTOR}x the reference solution's" in result.reason


def test_a_deadlock_fails(tmp_path):
    """The MoE's merge reading the Partition's own selector stream: the Reassemble waits
    for rows the Partition cannot route while its FIFOs are full (programs/moe_simple.step
    says why the programs declare the stream twice)."""
    name = "moe_topk_dynamic"
    text = edited(name, "Reassemble(y, merge, rank=0)", "Reassemble(y, route, rank=0)")
    result = check_task(name, candidate(tmp_path, "dead", text), seed=1)
    assert result.stage == "run" and result.reason.startswith("the run deadlocked")


def test_non_finite_outputs_fail_quietly(tmp_path, capfd):
    text = edited("softmax", "Map(Map(x, m, fn=sub), fn=exp)",
                  'Map(Map(Map(x, m, fn=sub), fn=affine(scale="-1000")), fn=exp)')
    result = check_task("softmax", candidate(tmp_path, "inf", text), seed=1)
    assert result.stage == "compare" and "non-finite" in result.reason
    assert "RuntimeWarning" not in capfd.readouterr().err


def test_the_time_limit_covers_the_compile(monkeypatch):
    """A compile slower than the limit fails the check, though its run alone would fit."""
    import time

    import stepc.frontend
    compile_file = stepc.frontend.compile_file

    def slow_compile(path, *args):  # at least a second, however idle the machine
        time.sleep(1)
        return compile_file(path, *args)
    monkeypatch.setattr(stepc.frontend, "compile_file", slow_compile)
    path = task("softmax").solution
    result = check_task("softmax", path, seed=1, time_limit=0.8)
    assert result.stage == "compile" and "time limit of 0.8 s" in result.reason
    assert float(result.reason.split("compiling the program took ")[1].split(" s")[0]) >= 1
    assert check_task("softmax", path, seed=1).passed  # the task's own limit: 10 s


def test_the_time_limit_stops_a_check(tmp_path):
    path = task("moe_topk_static").solution
    result = check_task("moe_topk_static", path, seed=1, time_limit=1e-6)
    assert not result.passed and "time limit of 1e-06 s" in result.reason
    assert check_task("moe_topk_static", path, seed=1).passed  # the task's own limit: 10 s


# ------------------------------------------------------------------ inputs and reward
def test_the_seed_draws_the_inputs_and_the_streams():
    """Same seed, same run; another seed, other KV lengths and so other cycles (and the
    reference solution passes on both)."""
    path = task("decode_attention").solution
    a, b = (check_task("decode_attention", path, seed=s) for s in (1, 1))
    c = check_task("decode_attention", path, seed=2)
    assert a.passed and c.passed
    assert a.candidate.cycles == b.candidate.cycles != c.candidate.cycles
    assert a.candidate.off_chip_bytes != c.candidate.off_chip_bytes
    assert check_task("softmax", task("softmax").solution).seed >= 0  # fresh without one


def test_the_checker_binds_its_inputs_not_the_declared_ones(tmp_path):
    """Declared sources are replaced by the checker's values: a solution with other
    `random(seed=)`s passes, and RoPE's R (declared `random` in its solution) is bound to
    the rotate-half matrix, without which the solution would not pass."""
    reseeded = edited("rmsnorm", "random(seed=1)", "random(seed=99)")
    assert check_task("rmsnorm", candidate(tmp_path, "seed", reseeded), seed=3).passed
    assert "tensor R   : f32[D, D] weight = random(seed=4)" in task("rope").solution.read_text()
    spec = next(t for t in task("rope").inputs if t.name == "R")
    drawn = draw_tensor(spec, np.random.default_rng(0))
    assert (drawn == rotate_half_matrix(64)).all()


def test_the_reward_is_reference_cycles_over_candidate_cycles(tmp_path):
    """Row tiles of 8 instead of 16 overlap the softmax's stages better: fewer cycles on
    less hardware, a reward above 1; the exp at a quarter of the compute rate, below 1."""
    rewards = []
    for name, old, new in [("tr8", "param TR = 16", "param TR = 8"),
                           ("slow", "fn=exp)", "fn=exp, compute_bw=256)")]:
        result = check_task("softmax", candidate(tmp_path, name, edited("softmax", old, new)),
                            seed=4)
        assert result.passed, result.reason
        assert result.reward == round(result.reference.cycles / result.candidate.cycles, 4)
        rewards.append(result.reward)
    assert rewards[0] > 1 > rewards[1]


@pytest.mark.parametrize("name,old,new,says", [
    ("softmax", "fn=exp)", "fn=exp, compute_bw=8192)",
     "compute_bw=8192 makes Map faster than the task's hardware: compute_bw must be at "
     "most 1024 (fabric.compute_bw on the preset"),
    ("softmax", "LinearOffChipLoad(X, tile=[TR, N])",
     "LinearOffChipLoad(X, tile=[TR, N], par_dispatch=4)", "par_dispatch=4 makes"),
    ("moe_topk_static", "Reassemble(y, merge, rank=0)",
     "Reassemble(y, merge, rank=0, switch_cycles=0)",
     "switch_cycles=0 makes Reassemble faster than the task's hardware: switch_cycles must "
     "be at least 1 (Reassemble's own"),
])
def test_operators_may_not_outrun_the_tasks_hardware(tmp_path, name, old, new, says):
    """A rate above the preset's, or routing below its own cost, is refused where it is
    set; the same knob turned the other way (slower) runs."""
    result = check_task(name, candidate(tmp_path, "fast", edited(name, old, new)), seed=4)
    assert result.stage == "guardrail" and says in result.reason, result.reason
    assert "fast.step:" in result.reason


def test_slower_knobs_run(tmp_path):
    text = edited("moe_topk_static", "Reassemble(y, merge, rank=0)",
                  "Reassemble(y, merge, rank=0, switch_cycles=3)")
    result = check_task("moe_topk_static", candidate(tmp_path, "slow", text), seed=4)
    assert result.passed and result.reward < 1


def test_the_allocation_is_counted_from_the_program():
    """rmsnorm's reference, counted by hand: loads of X and G, three Maps, the store (7
    operators, 3 compute units, 3 memory ports); 7 streams (x read twice, by rms_inv and
    the first mul) with 2-deep FIFOs; on chip, the artifact accounting's tile of each
    off-chip operator: X [8, 128] f32 4,096 B, G [1, 128] 512 B, Y [8, 128] 4,096 B."""
    result = check_task("rmsnorm", task("rmsnorm").solution, seed=1)
    assert result.candidate.resources == {"operators": 7, "compute_units": 3,
                                          "memory_ports": 3, "fifo_slots": 14,
                                          "on_chip_bytes": 4096 + 512 + 4096}
    assert result.budget == {"operators": 10, "compute_units": 4, "memory_ports": 4,
                             "fifo_slots": 21, "on_chip_bytes": 13056}  # 1.5x, rounded down
    stated = show_task("rmsnorm").resources  # what `stepc tasks show` lists
    assert stated["reference"] == result.candidate.resources
    assert stated["budget"] == result.budget


@pytest.mark.parametrize("name,old,new,says", [
    # row tiles of 32: twice the reference's on-chip bytes (it scored 0.64 before)
    ("softmax", "param TR = 16", "param TR = 32", "on-chip bytes 65,536 > 49,152"),
    # K tiles of 256: 1.8x the reference's on-chip bytes
    (GEMM, "param TK = 128", "param TK = 256", "on-chip bytes 90,112 > 73,728"),
    # deeper FIFOs everywhere buy buffering: 64 slots per stream
    ("softmax", "fn=row_max)", "fn=row_max, depth=64)", "FIFO slots 82 > 30"),
])
def test_more_hardware_than_the_budget_is_refused(tmp_path, name, old, new, says):
    result = check_task(name, candidate(tmp_path, "big", edited(name, old, new)), seed=4)
    assert result.stage == "guardrail" and result.candidate is None
    assert says in result.reason and "1.5x the reference solution's" in result.reason


def test_on_chip_bytes_the_run_decides_are_counted_after_it(tmp_path):
    """Buffering the rows a filtering FlatMap keeps: the count is data's, so the on-chip
    bytes (9,216 + 1,024 per kept row) are known only after the run, and checked then."""
    extra = ("rows = FlatMap(x, fn=retile_streamify(filter=true))\n"
             "Sink(Bufferize(rows, rank=1))\n")
    text = edited("rmsnorm", "r = Map(x,", extra + "r = Map(x,")
    result = check_task("rmsnorm", candidate(tmp_path, "late", text), seed=3)
    assert result.stage == "run" and result.candidate.resources["on_chip_bytes"] == 17408
    assert "on-chip bytes 17,408 > 13,056" in result.reason and result.reward == 0


def test_a_tiling_within_the_budget_scores_by_its_cycles(tmp_path):
    """Row tiles of 32 in gemm_ktiled: 65,536 on-chip bytes, under the 73,728 the budget
    allows, and faster than the reference."""
    text = edited(GEMM, "param TM = 16", "param TM = 32")
    result = check_task(GEMM, candidate(tmp_path, "tm32", text), seed=4)
    assert result.passed and result.candidate.resources["on_chip_bytes"] == 65536
    assert result.reward > 1


@pytest.mark.parametrize("name,old", [("rmsnorm", 'rms_inv(eps="1e-6")'),
                                      ("layernorm", 'rms_inv(eps="1e-5")')])
def test_a_norm_without_its_epsilon_fails(tmp_path, name, old):
    """On standard-normal rows an epsilon of 0 passed; the rows of 1e-4 tell it apart."""
    text = edited(name, old, 'rms_inv(eps="0")')
    result = check_task(name, candidate(tmp_path, "noeps", text), seed=4)
    assert result.stage == "compare" and "differs from the reference" in result.reason


def test_wide_rows_overflow_exp_without_the_maximum():
    """Every third row (the rows of 100s) holds a value whose f32 exp is infinite."""
    spec = next(t for t in task("softmax").inputs if t.name == "X")
    for seed in range(5):
        x = draw_tensor(spec, np.random.default_rng(seed))
        with np.errstate(over="ignore"):
            overflows = np.isinf(np.exp(x)).any(axis=1)
        assert overflows.tolist() == [r % 3 == 2 for r in range(x.shape[0])]
        assert np.allclose(np.abs(x[1::3]).max(), 0, atol=1e-2)


# ------------------------------------------------------------------ references
def test_rope_matrix_is_rotate_half():
    x = np.arange(8.0).reshape(1, 8)
    assert (x @ rotate_half_matrix(8)).tolist() == [[-4, -5, -6, -7, 0, 1, 2, 3]]


@pytest.mark.slow  # importing transformers takes ~25 s on a loaded machine
def test_references_agree_with_transformers():
    """RMSNorm, RoPE, LayerNorm and softmax against the implementations models use."""
    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((8, 64)), rng.standard_normal((1, 64))
    norm = llama.LlamaRMSNorm(64, eps=1e-6).double()
    norm.weight.data = torch.tensor(g[0])
    want = norm(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(REFERENCES["rmsnorm"]({"X": x, "G": g}, {})["Y"], want,
                               rtol=1e-6)  # LlamaRMSNorm normalises in float32
    cos, sin = rng.standard_normal((8, 64)), rng.standard_normal((8, 64))
    t = [torch.tensor(v)[None, None] for v in (x, cos, sin)]
    q, _ = llama.apply_rotary_pos_emb(t[0], t[0], t[1][0], t[2][0], unsqueeze_dim=1)
    np.testing.assert_allclose(REFERENCES["rope"]({"X": x, "COS": cos, "SIN": sin}, {})["Y"],
                               q[0, 0].numpy(), rtol=1e-12)
    bias = rng.standard_normal((1, 64))
    want = torch.nn.functional.layer_norm(torch.tensor(x), (64,), torch.tensor(g[0]),
                                          torch.tensor(bias[0]), eps=1e-5).numpy()
    np.testing.assert_allclose(REFERENCES["layernorm"]({"X": x, "G": g, "BIAS": bias}, {})["Y"],
                               want, rtol=1e-10)
    np.testing.assert_allclose(REFERENCES["softmax"]({"X": x}, {})["Y"],
                               torch.softmax(torch.tensor(x), dim=-1).numpy(), rtol=1e-12)


@pytest.mark.slow  # importing transformers takes ~25 s on a loaded machine
def test_transformers_rmsnorm_lowered_by_from_torch_is_held_to_the_budget(tmp_path):
    """A solution nobody wrote for the suite: `stepc from-torch` of transformers'
    LlamaRMSNorm. Under its own tensor names the guardrail refuses it; renamed to the
    task's interface it computes the right values (it passed with 716 cycles against the
    reference's 553 before the budget), but it allocates six compute units (pow, mean,
    the epsilon, rsqrt and two muls, where rms_inv is one) and [16, 128] row tiles: over
    the budget's 4 units and 13,056 on-chip bytes."""
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 128,
                                  "intermediate_size": 256, "num_attention_heads": 4,
                                  "num_hidden_layers": 1, "vocab_size": 100,
                                  "rms_norm_eps": 1e-6}))
    lowered = tmp_path / "norm.step"
    made = run("from-torch", "transformers:LlamaRMSNorm", "--hf-config", str(config),
               "--input", "x=f32[32,128]", "-o", str(lowered))
    assert made.exit_code == 0, made.output
    result = check_task("rmsnorm", lowered, seed=1)
    assert result.stage == "guardrail" and "does not declare the task's tensor X" in \
        result.reason
    text = lowered.read_text()
    for old in ("HIDDEN_STATES", "tensor weight ", "LinearOffChipLoad(weight,"):
        assert old in text, old
    renamed = text.replace("HIDDEN_STATES", "X").replace("tensor weight ", "tensor G ") \
        .replace("LinearOffChipLoad(weight,", "LinearOffChipLoad(G,")
    result = check_task("rmsnorm", candidate(tmp_path, "renamed", renamed), seed=1)
    assert result.stage == "guardrail", result.reason
    assert "compute units 6 > 4, on-chip bytes 16,896 > 13,056" in result.reason


# ------------------------------------------------------------------ command line
def test_cli_list_show_and_check_exit_codes(tmp_path):
    listed = run("tasks", "list")
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.output.splitlines()] == task_names()
    doc = json.loads(run("tasks", "list", "--format", "json").output)
    assert [t["name"] for t in doc["tasks"]] == task_names()

    shown = run("tasks", "show", "softmax")
    assert shown.exit_code == 0
    assert "# Row softmax" in shown.output and "tensor X : f32[32, 256] input" in shown.output
    assert "| compute units | 5 | 7 |" in shown.output
    assert "switch_cycles= at least 1" in shown.output
    assert task("softmax").solution.read_text() in shown.output
    assert "## Reference solution" not in run("tasks", "show", "softmax",
                                                "--no-reference").output
    attention = run("tasks", "show", "decode_attention").output
    assert "stream kv_lens: 4 lengths, multiples of 8 from 8 to 64" in attention

    folder = task("softmax").folder
    ok = run("tasks", "check", "softmax", str(folder / "solution.step"), "--seed", "5")
    assert ok.exit_code == 0 and "PASS (seed 5" in ok.output and "reward: 1.0000" in ok.output
    bad = run("tasks", "check", "softmax", str(folder / "wrong_no_norm.step"), "--format",
              "json")
    assert bad.exit_code == 1
    doc = json.loads(bad.output)
    assert doc["schema"] == "stepc-tasks-check/1" and doc["status"] == "fail"
    assert doc["reward"] == 0.0 and doc["stage"] == "compare"
    assert set(doc["budget"]) == set(doc["candidate"]["resources"]) == {
        "operators", "compute_units", "memory_ports", "fifo_slots", "on_chip_bytes"}
    lanes = run("tasks", "check", "rmsnorm", str(task("rmsnorm").folder / "wrong_lanes4.step"))
    assert lanes.exit_code == 1 and "compute units 12 > 4" in lanes.output
    piped = CliRunner().invoke(main, ["tasks", "check", "softmax", "-", "--seed", "5"],
                               input=(folder / "solution.step").read_text())
    assert piped.exit_code == 0 and "PASS" in piped.output


@pytest.mark.parametrize("args,says", [
    (["tasks", "show", "nope"], "no task `nope`"),
    (["tasks", "check", "gemm", "x.step"], "no task `gemm`"),
    (["tasks", "check", "softmax", "missing.step"], "missing.step: no such file"),
    (["tasks", "check", "softmax", "{solution}", "--seed", "-1"], "seed"),
    (["tasks", "check", "softmax", "{solution}", "--time-limit", "0"], "time_limit"),
])
def test_cli_usage_errors_exit_2(args, says):
    solution = str(task("softmax").solution)
    result = run(*[a.replace("{solution}", solution) for a in args])
    assert result.exit_code == 2 and says in result.output, result.output


def test_api_refuses_bad_arguments():
    with pytest.raises(InputError, match="no task"):
        task("../softmax")
    with pytest.raises(InputError, match="seed"):
        check_task("softmax", task("softmax").solution, seed="3")
