"""editors/vscode: the extension's manifest, and its TextMate grammar: valid JSON, every
keyword of step.tx highlighted, and the bundled programs' comments, strings, keywords and
numbers given their scopes (by a small TextMate matcher: the grammar's rules are single-line
`match` rules, whose regular expressions Python's `re` reads as Oniguruma does)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stepc.grammar.lexer import tokenize

REPO = Path(__file__).resolve().parent.parent
VSCODE = REPO / "editors" / "vscode"
GRAMMAR = VSCODE / "syntaxes" / "step.tmLanguage.json"
PROGRAMS = sorted([*REPO.glob("programs/*.step"), *REPO.glob("programs/lib/*.step")])
KEYWORD_SCOPES = ("keyword.", "storage.type.", "support.type.", "constant.language.")


def grammar_keywords() -> set[str]:
    """The words step.tx reserves: its quoted literals and the alternatives of its
    keyword regexes (`(MultiHot|Index)`, `(true|false)`)."""
    tx = (REPO / "stepc" / "grammar" / "step.tx").read_text(encoding="utf-8")
    words = set(re.findall(r"'([A-Za-z_]\w*)'", tx))
    for alternatives in re.findall(r"/\(((?:\w+\|)+\w+)\)", tx):
        words.update(alternatives.split("|"))
    return words


def rules(grammar: dict) -> list[dict]:
    """The grammar's match rules in the order TextMate tries them."""
    def expand(patterns):
        for p in patterns:
            if "include" in p:
                yield from expand([grammar["repository"][p["include"].lstrip("#")]])
            elif "patterns" in p:
                yield from expand(p["patterns"])
            else:
                yield p
    return list(expand(grammar["patterns"]))


def scopes(line: str, rules_: list[dict]) -> list[str | None]:
    """The innermost scope of each character of a line, as TextMate assigns it: at each
    position the rule matching earliest wins (the first listed on a tie)."""
    out: list[str | None] = [None] * len(line)
    pos = 0
    while pos < len(line):
        found = None
        for rule in rules_:
            m = re.compile(rule["match"]).search(line, pos)
            if m and (found is None or m.start() < found[1].start()):
                found = (rule, m)
        if found is None:
            break
        rule, m = found
        if "name" in rule:
            out[m.start():m.end()] = [rule["name"]] * (m.end() - m.start())
        for group, capture in rule.get("captures", {}).items():
            if m.group(int(group)) is not None:
                a, b = m.span(int(group))
                out[a:b] = [capture["name"]] * (b - a)
        pos = max(m.end(), pos + 1)
    return out


@pytest.fixture(scope="module")
def grammar() -> dict:
    return json.loads(GRAMMAR.read_text(encoding="utf-8"))


def test_the_manifest_declares_the_language_grammar_and_client():
    manifest = json.loads((VSCODE / "package.json").read_text(encoding="utf-8"))
    (language,) = manifest["contributes"]["languages"]
    assert language["id"] == "step" and ".step" in language["extensions"]
    assert (VSCODE / language["configuration"]).is_file()
    (grammar,) = manifest["contributes"]["grammars"]
    assert grammar["language"] == "step" and (VSCODE / grammar["path"]) == GRAMMAR
    json.loads((VSCODE / language["configuration"]).read_text(encoding="utf-8"))
    client = (VSCODE / manifest["main"]).read_text(encoding="utf-8")
    assert '"stepc", "lsp"' in json.dumps(manifest["contributes"]["configuration"]
                                          ["properties"]["stepc.command"]["default"])
    assert "vscode-languageclient" in client and "vscode-languageclient" in \
        manifest["dependencies"]
    settings = manifest["contributes"]["configuration"]["properties"]
    assert {"stepc.defines", "stepc.hw", "stepc.inlayHints"} <= set(settings)


def test_every_rule_is_a_valid_single_line_match(grammar):
    assert grammar["scopeName"] == "source.step"
    for rule in rules(grammar):
        assert set(rule) <= {"name", "match", "captures", "comment"}, rule
        re.compile(rule["match"])


def test_every_keyword_of_the_grammar_is_highlighted(grammar):
    keywords = grammar_keywords()
    assert {"param", "tensor", "stream", "graph", "for", "in", "return", "assume", "import",
            "Strm", "Tile", "Buffer", "MultiHot", "Index", "true", "false"} <= keywords
    for word in sorted(keywords):
        got = set(scopes(word, rules(grammar)))
        assert len(got) == 1 and next(iter(got)) and next(iter(got)).startswith(
            KEYWORD_SCOPES), f"{word}: {got}"


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_bundled_programs_are_highlighted(grammar, path):
    keywords = grammar_keywords()
    expected = {"comment": "comment.", "string": "string.", "number": "constant.numeric."}
    rules_ = rules(grammar)
    lines = path.read_text(encoding="utf-8").split("\n")
    per_line = [scopes(line, rules_) for line in lines]
    for tok in tokenize("\n".join(lines)):
        if tok.end_line != tok.line:
            continue
        want = expected.get(tok.kind)
        if tok.kind == "name" and tok.text in keywords:
            want = KEYWORD_SCOPES
        if want is None:
            continue
        got = set(per_line[tok.line - 1][tok.col - 1:tok.col - 1 + len(tok.text)])
        assert len(got) == 1 and (next(iter(got)) or "").startswith(want), \
            f"{path.name}:{tok.line}:{tok.col}: {tok.text!r} has {got}"


def test_the_server_without_its_extra_says_what_to_install():
    """`stepc lsp` where pygls is not installed: a message and exit 2, no traceback."""
    code = ("import sys; sys.modules['pygls'] = None; sys.argv = ['stepc', 'lsp']\n"
            "from stepc.cli import run; run()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert r.stderr.strip() == "stepc lsp needs pygls and lsprotocol: pip install 'stepc[lsp]'"
