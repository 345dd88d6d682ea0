"""stepc fmt: the layout rules, idempotence, meaning kept (the elaborated graph of fmt(x)
equals that of x for every bundled and generated program and perturbations of them), the
bundled programs formatted, and the command line (--check, --diff, stdin, in place)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from bundled import SMALL
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepc.cli import main
from stepc.diagnostics import StepError
from stepc.grammar.format import format_source
from stepc.grammar.lexer import tokenize
from stepc.grammar.parse import parse
from stepc.graph.elaborate import elaborate
from stepc.source import SourceFile

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = sorted([*REPO.glob("programs/*.step"), *REPO.glob("programs/lib/*.step"),
                   *REPO.glob("stepc/ops/examples/*.step")])
DOCS = [REPO / "README.md", *sorted(REPO.glob("docs/*.md"))]
STEP_FENCE = re.compile(r"^```step\n(.*?)^```$", re.DOTALL | re.MULTILINE)
sys.path.insert(0, str(REPO / "benchmarks"))
from gen_moe import generate  # noqa: E402


def fmt(text: str) -> str:
    return format_source(text, "t.step")


# ---------------------------------------------------------------- layout rules
def test_spacing_is_normalized():
    src = ("param  N=4\ntensor X:bf16[N,64]  input=random(seed = 1)\n"
           "stream s:Strm< MultiHot<N> ,0 >[ N ]=external( \"routing\" )\n"
           "x=LinearOffChipLoad( X ,tile=[ 1,64 ] )\n"
           "y = Map(x,fn=ceildiv_int(by=N,plus= - 1),depth=N*2+1)\n"
           "assume N>=1\n")
    assert fmt(src) == (
        "param N = 4\ntensor X : bf16[N, 64] input = random(seed=1)\n"
        "stream s : Strm<MultiHot<N>, 0>[N] = external(\"routing\")\n"
        "x = LinearOffChipLoad(X, tile=[1, 64])\n"
        "y = Map(x, fn=ceildiv_int(by=N, plus=-1), depth=N * 2 + 1)\n"
        "assume N >= 1\n")


def test_blocks_are_indented_and_continuations_follow_their_bracket():
    src = ("for i in 0..4 {\n  for j in 0..2 {\nx[i] = Foo(a,\n b,\n      c)\n}\n"
           "        }\ngraph g(a, b) {\nreturn Zip(a,\nb)\n}\n")
    assert fmt(src) == ("for i in 0..4 {\n    for j in 0..2 {\n        x[i] = Foo(a,\n"
                        "                   b,\n                   c)\n    }\n}\n"
                        "graph g(a, b) {\n    return Zip(a,\n               b)\n}\n")


def test_a_bracket_ending_its_line_indents_by_four():
    assert fmt("x = Foo(\na, b\n)\n") == "x = Foo(\n    a, b\n)\n"


def test_aligned_columns_are_kept_and_unaligned_ones_are_not_invented():
    src = ("x    = A(a)\nlong = B(b)\ny = C(c)\nzz = D(d)\n\n"
           "tensor X  : bf16[1, 2]  input\ntensor YY : bf16[1]     output\n")
    assert fmt(src) == src
    # code that grows inside an aligned run moves the column right for the whole run
    assert fmt(src.replace("[1, 2]  input", "[1,2,3] input")).splitlines()[-2:] == \
        ["tensor X  : bf16[1, 2, 3] input", "tensor YY : bf16[1]       output"]
    # a column nobody aligned is one space
    assert fmt("a   = A(a)\nbb = B(b)\n") == "a = A(a)\nbb = B(b)\n"


def test_trailing_comments_of_a_paragraph_share_a_column():
    src = ("x = A(a)  # one\nlonger = B(b)   # two\n    # under longer\n\n"
           "y = C(c) # three\n")
    assert fmt(src) == ("x = A(a)        # one\nlonger = B(b)   # two\n"
                        "                # under longer\n\ny = C(c)  # three\n")


def test_a_comment_line_inside_a_statement_stays_with_its_code():
    # wherever it starts in the input, it lines up with the continuation and does not
    # join the trailing comments (its column would otherwise differ in a second pass)
    for col in (0, 2, 12, 40):
        src = f"w = Foo(a,  # one\n{' ' * col}# inside\n  b)  # two\n"
        out = fmt(src)
        assert out == "w = Foo(a,  # one\n        # inside\n        b)  # two\n"
        assert fmt(out) == out


def test_a_shape_comment_under_a_long_statement_stays_deeper_than_it():
    # found by the idempotence property: the shape comment under `xt` was placed left of
    # its statement, so the next pass read it as a plain comment and moved it again
    src = ('  graph  layer   (  bar ,l   )   { \n     for r  in   0..   R  {\n    }\nfor   r  in   0  ..  MR {  # note \n     for   g in   0..G   {\n\n xt= Accum (   group ,  fn   =   retile_row ,  rank   =1   ,   dtype   =   f32 ,  compute_bw =  MOE_BW   ) # note  \n     # inserted\n      }    # note\n for g in  0  .. G  {\n     }    # note  \n }  # note \n}  # note\n   for  l   in 0   ..L   {\n      }  \n')
    once = format_source(src)
    assert format_source(once) == once


def test_comments_blank_lines_and_line_count_are_kept():
    src = "# header\n\n\n   # indented note\nparam N = 1   \n\n\n# end\n\n\n"
    out = fmt(src)
    assert out == "# header\n\n\n# indented note\nparam N = 1\n\n\n# end\n"
    assert out.count("\n") == src.rstrip("\n").count("\n") + 1


def test_crlf_and_bom_are_kept():
    src = "\ufeffparam  N = 1\r\nparam M=2\r\n"
    assert fmt(src) == "\ufeffparam N = 1\r\nparam M = 2\r\n"


def test_a_syntax_error_formats_nothing():
    with pytest.raises(StepError) as e:
        fmt("x = Foo(a,\n")
    assert e.value.diagnostics[0].code == "E0001"


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_bundled_programs_are_formatted(path):
    text = path.read_text(encoding="utf-8")
    assert format_source(text, str(path)) == text, \
        f"run `stepc fmt {path.relative_to(REPO).as_posix()}`"


def doc_blocks():
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in STEP_FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            yield pytest.param(m.group(1), id=f"{doc.relative_to(REPO).as_posix()}:{line}")


@pytest.mark.parametrize("block", list(doc_blocks()))
def test_step_blocks_of_the_docs_are_formatted(block):
    """Every ```step block of README.md and docs/*.md is a whole program in fmt's layout
    (fragments are ```text)."""
    assert format_source(block, "block.step") == block


def test_one_long_line_does_not_push_a_paragraphs_comments():
    src = ("a = A(x)          # one\nbb = B(x)         # two\ncc = C(x)         # three\n"
           "long = LinearOffChipLoad(W, tile=[64, 64], stride=[0, 1], shape=[1])  # four\n")
    assert fmt(src) == src
    # a comment that would end past the line limit at the column follows its code
    wide = "x" * 70
    src = (f"a = A(x)  # short\nbb = B(x)  # short\n{wide} = C(x)  # {'w' * 30}\n"
           f"{wide} = D(x)  # {'w' * 30}\n")
    assert all(len(line) <= 100 or line.startswith(wide) for line in fmt(src).splitlines())
    assert fmt(src).splitlines()[2] == f"{wide} = C(x)  # {'w' * 30}"


# ---------------------------------------------------------------- meaning and idempotence
def graph_of(text: str, path: Path, params: dict | None = None) -> dict:
    """The elaborated graph (under `params`) without positions: nodes (name, op, attrs,
    inputs), edges, params and tensors."""
    src = SourceFile(str(path), text)

    def load(name, span):
        s = SourceFile(name, Path(name).read_text(encoding="utf-8"))
        return s, parse(s)

    prog, bag, _ = elaborate(parse(src), src, params or {}, load, str(path))
    assert prog is not None and not bag.errors, [d.message for d in bag.errors]
    nodes = {n.name: (n.op, plain(n.attrs), tuple(n.inputs), tuple(n.outputs))
             for n in prog.nodes.values()}
    edges = sorted((e.src, e.port, e.dst, e.slot, e.feedback) for e in prog.edges)
    tensors = {t.name: (t.dtype, t.shape, t.role, plain(t.source))
               for t in prog.tensors.values()}
    return {"nodes": nodes, "edges": edges, "params": prog.params, "tensors": tensors}


def plain(v):
    """A value with the source positions inside it left out."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return tuple(plain(x) for x in v)
    if hasattr(v, "__dataclass_fields__"):
        return (type(v).__name__,) + tuple(plain(getattr(v, f)) for f in v.__dataclass_fields__
                                           if f != "span" and not f.endswith("_span"))
    return v


_SAFE_GAP = re.compile(r"[()\[\],=+*:<>]")


@st.composite
def perturbed(draw, text: str) -> str:
    """`text` with the same meaning and lines in a different layout: spacing between
    tokens and indentation changed, trailing spaces and comments added, blank lines and
    comment lines inserted."""
    lines = text.split("\n")
    out: list[str] = []
    for line in lines:
        toks = [t for t in tokenize(line) if t.kind != "comment"]
        comment = next((t.text for t in tokenize(line) if t.kind == "comment"), None)
        if not toks or any(t.kind == "string" and "\n" in t.text for t in toks):
            out.append(line)
        else:
            pieces = [" " * draw(st.integers(0, 6))]
            for a, b in zip(toks, toks[1:]):
                pieces.append(a.text)
                must = not (_SAFE_GAP.search(a.text) or _SAFE_GAP.search(b.text)
                            or a.text in ("-", "..") or b.text in ("-", ".."))
                pieces.append(" " * draw(st.integers(1 if must else 0, 3)))
            pieces.append(toks[-1].text)
            if comment is None and draw(st.booleans()):
                comment = "# note"
            if comment is not None:
                pieces.append(" " * draw(st.integers(1, 4)) + comment)
            out.append("".join(pieces) + " " * draw(st.integers(0, 2)))
        extra = draw(st.sampled_from(["", "", "", "blank", "comment"]))
        if extra == "blank":
            out.append("")
        elif extra == "comment":
            out.append(" " * draw(st.integers(0, 8)) + "# inserted")
    return "\n".join(out)


SLOW = settings(max_examples=6, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("path", [p for p in PROGRAMS if "lib" not in p.parts],
                         ids=lambda p: p.name)
def test_formatting_keeps_the_graph_of_bundled_programs(path):
    """(Elaborated at the bundled.SMALL sizes: every statement, shorter loops.)"""
    text = path.read_text(encoding="utf-8")
    params = SMALL.get(path.stem) if path.parent.name == "programs" else None
    assert graph_of(fmt(text), path, params) == graph_of(text, path, params)


@pytest.mark.parametrize("experts", [4, 128])
def test_formatting_keeps_the_graph_of_generated_programs(experts, tmp_path):
    text = generate(experts)
    path = tmp_path / "moe.step"
    formatted = fmt(text)
    assert fmt(formatted) == formatted
    assert graph_of(formatted, path) == graph_of(text, path)


@SLOW
@given(st.data())
def test_perturbed_programs_keep_their_graph_and_format_idempotently(data):
    path = data.draw(st.sampled_from([p for p in PROGRAMS if p.name in (
        "moe_simple.step", "swiglu.step", "attention_dynamic.step")]))
    text = data.draw(perturbed(path.read_text(encoding="utf-8")))
    formatted = fmt(text)
    assert fmt(formatted) == formatted
    assert formatted.count("\n") == text.rstrip("\n").count("\n") + 1
    assert graph_of(formatted, path) == graph_of(text, path)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_formatting_is_idempotent(data):
    path = data.draw(st.sampled_from(PROGRAMS))
    text = data.draw(perturbed(path.read_text(encoding="utf-8")))
    formatted = fmt(text)
    assert fmt(formatted) == formatted


# ---------------------------------------------------------------- the command
def run(args, input=None):
    return CliRunner().invoke(main, ["fmt", *args], input=input, catch_exceptions=False)


def messy(tmp_path: Path, name: str = "m.step") -> Path:
    p = tmp_path / name
    p.write_text("param  N=4\nx = Foo( N )\n", encoding="utf-8")
    return p


def test_check_lists_files_that_would_change_and_writes_nothing(tmp_path):
    p = messy(tmp_path)
    tidy = tmp_path / "tidy.step"
    tidy.write_text("param N = 4\n", encoding="utf-8")
    r = run(["--check", str(tmp_path)])
    assert r.exit_code == 1
    assert r.stdout.splitlines() == [str(p)]
    assert "1 file would be reformatted" in r.stderr
    assert p.read_text() == "param  N=4\nx = Foo( N )\n"
    assert run(["--check", str(tidy)]).exit_code == 0


def test_diff_prints_a_unified_diff(tmp_path):
    p = messy(tmp_path)
    r = run(["--diff", str(p)])
    assert r.exit_code == 0
    assert "-param  N=4\n-x = Foo( N )\n+param N = 4\n+x = Foo(N)\n" in r.stdout
    assert p.read_text() == "param  N=4\nx = Foo( N )\n"


def test_files_are_rewritten_in_place(tmp_path):
    p = messy(tmp_path)
    os.chmod(p, 0o640)
    r = run([str(p)])
    assert r.exit_code == 0 and f"formatted {p}" in r.stderr
    assert p.read_text() == "param N = 4\nx = Foo(N)\n"
    assert os.stat(p).st_mode & 0o777 == 0o640
    assert run([str(p)]).stderr == ""  # nothing left to do
    assert sorted(os.listdir(tmp_path)) == ["m.step"]


def test_standard_input_to_standard_output():
    r = run(["-"], input="param  N=4\n")
    assert r.exit_code == 0 and r.stdout == "param N = 4\n"


def test_a_file_with_a_syntax_error_is_left_as_it_is(tmp_path):
    p = tmp_path / "bad.step"
    p.write_text("x = Foo(a,\n", encoding="utf-8")
    good = messy(tmp_path)
    r = run([str(p), str(good)])
    assert r.exit_code == 1
    assert "error[E0001]" in r.stderr and "not formatted" in r.stderr
    assert p.read_text() == "x = Foo(a,\n"
    assert good.read_text() == "param N = 4\nx = Foo(N)\n"


def test_a_failed_write_leaves_the_file_whole(tmp_path, monkeypatch):
    from stepc.cli import editor as cli_editor
    p = messy(tmp_path)
    real = cli_editor._rewrite
    calls = []

    def fail_first(f, data):
        calls.append(data)
        if len(calls) == 1:
            f.seek(0)
            f.write(data[:5])  # half written, then the disk is full
            raise OSError(28, "No space left on device")
        real(f, data)
    monkeypatch.setattr(cli_editor, "_rewrite", fail_first)
    r = run([str(p)])
    assert r.exit_code == 2 and "cannot write" in r.stderr
    assert p.read_text() == "param  N=4\nx = Foo( N )\n"
    assert sorted(os.listdir(tmp_path)) == ["m.step"]


def test_formatting_keeps_the_files_identity(tmp_path):
    """Written in place: the inode, hard links and owner stay; a read-only file is refused."""
    p = messy(tmp_path)
    link = tmp_path / "link.step"
    os.link(p, link)
    inode = os.stat(p).st_ino
    assert run([str(p)]).exit_code == 0
    assert os.stat(p).st_ino == inode and os.stat(p).st_nlink == 2
    assert link.read_text() == "param N = 4\nx = Foo(N)\n"
    ro = messy(tmp_path, "ro.step")
    os.chmod(ro, 0o444)
    r = run([str(ro)])
    assert r.exit_code == 2 and "read-only" in r.stderr and "Traceback" not in r.stderr
    assert ro.read_text() == "param  N=4\nx = Foo( N )\n"
    assert os.stat(ro).st_mode & 0o777 == 0o444
    assert run(["--check", str(ro)]).exit_code == 1  # reading it is fine


def test_what_is_not_a_regular_file_or_too_large_is_refused(tmp_path, monkeypatch):
    import stepc.source
    r = run(["/dev/zero"])
    assert r.exit_code == 2 and "not a regular file" in r.stderr
    fifo = tmp_path / "pipe.step"
    os.mkfifo(fifo)
    r = run([str(fifo)])
    assert r.exit_code == 2 and "not a regular file" in r.stderr
    monkeypatch.setattr(stepc.source, "MAX_SOURCE_BYTES", 10)
    r = run([str(messy(tmp_path))])
    assert r.exit_code == 2 and "too large" in r.stderr
    r = run(["-"], input="param  N=4\n")
    assert r.exit_code == 2 and "too large" in r.stderr


def test_a_long_sum_formats_to_the_chain_limit_and_is_refused_past_it():
    """A sum of n terms chains n - 1 operators (stepc.grammar.nesting): the longest allowed
    formats; one of 3,000 terms is refused with E0006, not a RecursionError."""
    from stepc.grammar.nesting import MAX_CHAIN
    src = "param N = " + " + ".join(["1"] * (MAX_CHAIN + 1)) + "\n"
    assert fmt(src.replace(" + ", "+")) == src
    r = run(["-"], input="param N = " + "+".join(["1"] * 3000) + "\n")
    assert r.exit_code == 1 and "error[E0006]" in r.stderr and "Traceback" not in r.stderr


def test_unicode_names_lex_as_the_parser_reads_them():
    assert fmt("param  Né=4\nx = Fooé( Né )\n") == "param Né = 4\nx = Fooé(Né)\n"
    r = run(["-"], input="x = Fooé(1)\n")
    assert r.exit_code == 0 and r.stdout == "x = Fooé(1)\n"


def test_comment_text_is_kept_to_its_last_character():
    src = "param N = 4  # ends in a separator\x1e\n# own line\u3000\n"
    assert fmt(src) == src
    assert fmt("param N = 4  # spaces go \t \n") == "param N = 4  # spaces go\n"


def test_a_missing_path_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(main, ["fmt", str(tmp_path / "none.step")])
    assert r.exit_code == 2 and "no such file or directory" in r.stderr
