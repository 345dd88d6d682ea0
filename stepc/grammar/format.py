"""The canonical layout of .step source (`stepc fmt`).

The formatter never joins or splits lines, so line numbers, diagnostics and anonymous
node names like `Sink@95` stay valid. Line by line:

- indentation: four spaces per `{ }` block; a continuation line inside brackets lines up
  after the open bracket (four spaces deeper than its line when the bracket ends a line);
- spacing: one space around `=` in statements, `:`, comparisons and binary operators and
  after commas; none inside brackets, around `=` of keyword arguments, around `..`, after
  a unary minus, or inside type brackets (`Strm<MultiHot<E>, 0>[B]`);
- columns you aligned stay aligned: consecutive statements of one kind whose `=` (or the
  `:`, role and `=` of declarations) start in one column keep that column, moved right
  when a line's code would reach it;
- trailing comments of a paragraph (lines between blank lines or comment lines) start in
  one column: the one most of them use already when it aligns at least ALIGNED_SHARE of
  them, else the leftest that does (else the one that aligns the most); a comment is
  aligned where its code ends two spaces before the column and its line stays within
  LINE_LIMIT, and any other follows its code two spaces after it, so one long line does
  not push a paragraph's comments right; a comment on a line of its own, indented under
  a statement (the shape comment of a long line), joins the column;
- comments are kept verbatim (only trailing spaces and tabs go), blank lines are kept,
  trailing whitespace is removed and the file ends with one newline.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from stepc.diagnostics import StepError
from stepc.grammar import ast
from stepc.grammar.lexer import ANGLE_TYPES, KEYWORDS, Token, tokenize
from stepc.grammar.parse import parse
from stepc.source import SourceFile

INDENT = 4
COMMENT_GAP = 2
LINE_LIMIT = 100  # a trailing comment is aligned only where its line stays within this
ALIGNED_SHARE = 0.75  # of a paragraph's trailing comments, the share its column aligns
_BLANKS = " \t\f\r"  # the whitespace the grammar skips; other characters are content
_OPEN, _CLOSE = ("(", "["), (")", "]")
_BEFORE_UNARY = frozenset({"(", "[", ",", "=", "==", "!=", "<=", ">=", "<", ">", "+", "-",
                           "*", "/", "//", "%", ":", "..", "{", ";", "return", "in"})
# Alignment points of each statement kind, in order.
_POINTS = {"Binding": (":", "="), "Param": ("=",), "TensorDecl": (":", "role", "="),
           "StreamDecl": (":", "=")}


class FormatError(Exception):
    """The formatted text would not mean what the input meant (a bug in the formatter)."""


def format_source(text: str, name: str = "<stdin>") -> str:
    """`text` in canonical layout. A syntax error raises StepError (nothing is formatted);
    the result is checked to parse to the same program (FormatError if not)."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    body = text[len(bom):]
    newline = "\r\n" if body.count("\r\n") * 2 > body.count("\n") else "\n"
    body = body.replace("\r\n", "\n")
    module = parse(SourceFile(name, body))
    out = _Formatter(body, module).run()
    try:  # text that is already formatted means what it meant: no second parse
        same = out == body or meaning(parse(SourceFile(name, out))) == meaning(module)
    except StepError:
        same = False
    if not same:
        raise FormatError(f"{name}: formatting would change the program, so it is left "
                          "unchanged (a bug in stepc fmt; please report it)")
    return bom + out.replace("\n", newline)


def meaning(node) -> tuple:
    """An AST with its positions left out, flattened in prefix order, to compare two
    programs (iterative: a sum of thousands of terms nests that deep)."""
    out: list = []
    todo = [node]
    while todo:
        x = todo.pop()
        if isinstance(x, tuple):
            out.append(("tuple", len(x)))
            todo.extend(reversed(x))
        elif hasattr(x, "__dataclass_fields__"):
            fields = [f for f in x.__dataclass_fields__
                      if f != "span" and not f.endswith("_span")]
            out.append((type(x).__name__, len(fields)))
            todo.extend(getattr(x, f) for f in reversed(fields))
        else:
            out.append(x)
    return tuple(out)


@dataclass
class _Open:
    """An open bracket: where a continuation line inside it starts."""

    char: str
    col: int  # output column just after the bracket
    indent: int  # indentation of its line
    ends_line: bool


@dataclass
class _Line:
    """One output line: its kind, code (with indentation) and trailing comment."""

    kind: str  # code | blank | comment (on its own) | shape (own line, under code) | verbatim
    code: str = ""
    comment: str | None = None
    comment_col: int = 0  # the comment's column in the input
    stmt_indent: int = 0
    extras: dict[int, int] = field(default_factory=dict)  # token index -> extra spaces
    gap: int = 0  # spaces before the trailing comment


class _Formatter:
    def __init__(self, text: str, module: ast.Module):
        self.lines = text.split("\n")
        while self.lines and not self.lines[-1].strip():
            self.lines.pop()
        self.by_line: dict[int, list[Token]] = {}
        self.comments: dict[int, Token] = {}
        verbatim: set[int] = set()
        tokens = tokenize(text)
        self.unary, self.angle_open, self.angle_close = _roles(tokens)
        for tok in tokens:
            if tok.kind == "comment":
                self.comments[tok.line] = tok
                continue
            self.by_line.setdefault(tok.line, []).append(tok)
            if tok.end_line > tok.line:  # a string over several lines: keep them as they are
                verbatim.update(range(tok.line, tok.end_line + 1))
        self.starts: dict[int, ast.Statement] = {}  # line -> the statement starting it
        self.continued: set[int] = set()  # lines inside a statement that started earlier
        self._index(module.statements)
        self.out = [self._classify(ln, verbatim) for ln in range(1, len(self.lines) + 1)]

    def _index(self, statements) -> None:
        for s in statements:
            line = s.span.line
            toks = self.by_line.get(line, [])
            if toks and toks[0].col == s.span.col:
                self.starts[line] = s
            end = s.span.end_line
            if isinstance(s, (ast.ForLoop, ast.GraphDef)):  # the header, up to its `{`
                end = next(ln for ln in range(line, end + 1)
                           if any(t.text == "{" for t in self.by_line.get(ln, [])))
                self._index(s.body)
            self.continued.update(range(line + 1, end + 1))

    def _classify(self, ln: int, verbatim: set[int]) -> _Line:
        if ln in verbatim:
            return _Line("verbatim", self.lines[ln - 1])
        toks, comment = self.by_line.get(ln), self.comments.get(ln)
        if toks:
            return _Line("code")
        if comment is None:
            return _Line("blank")
        if ln in self.continued:  # a comment line inside a statement: laid out as code
            return _Line("comment")
        # A comment under a statement's line, indented deeper than the statement, continues
        # it: its shape comment, when the code is too long to hold one.
        prev = self.out[-1] if hasattr(self, "out") else None
        above = ln - 1
        while above > 0 and not self.by_line.get(above) and above in self.comments:
            above -= 1
        code = self.by_line.get(above)
        stmt = above
        while stmt in self.continued and stmt not in self.starts:
            stmt -= 1
        stmt_toks = self.by_line.get(stmt)
        if code and stmt_toks and code[-1].text != "{" and code[0].text != "}" and \
                all(k in self.comments for k in range(above + 1, ln)) and \
                comment.col > stmt_toks[0].col and (prev is None or prev.kind != "comment"):
            return _Line("shape")
        return _Line("comment")

    # ------------------------------------------------------------ driver
    def run(self) -> str:
        self._align_statements()
        self._render()
        self._align_comments()
        text = "\n".join(
            ln.code if ln.kind == "verbatim" else
            (ln.code + " " * ln.gap + ln.comment if ln.comment is not None else ln.code)
            .rstrip(_BLANKS) for ln in self.out)
        return text + "\n" if text else ""

    # ------------------------------------------------------------ one line
    def _layout(self, tokens: list[Token], extras: dict[int, int], stack: list[_Open],
                start_col: int) -> tuple[str, list[int]]:
        """The tokens of one line laid out from column `start_col` (updates the stack of
        open brackets); returns the text and each token's column."""
        parts: list[str] = []
        cols: list[int] = []
        col = start_col
        for i, tok in enumerate(tokens):
            gap = "" if i == 0 else self._space(tokens[i - 1], tok, stack)
            gap += " " * extras.get(i, 0)
            parts.append(gap + tok.text)
            col += len(gap)
            cols.append(col)
            col += len(tok.text)
            if tok.text in _OPEN or tok.offset in self.angle_open:
                stack.append(_Open(tok.text, col, start_col, i == len(tokens) - 1))
            elif (tok.text in _CLOSE or tok.offset in self.angle_close) and stack:
                stack.pop()
        return "".join(parts), cols

    def _space(self, prev: Token, tok: Token, stack: list[_Open]) -> str:
        """The space between two tokens of one line (`stack`: brackets open before `tok`)."""
        p, t = prev.text, tok.text
        inside = bool(stack)
        if t in _CLOSE or t in (",", ";") or tok.offset in self.angle_close:
            return ""
        if p in _OPEN or prev.offset in self.angle_open or prev.offset in self.unary:
            return ""
        if p == ".." or t == ".." or tok.offset in self.angle_open:
            return ""
        if t in _OPEN and ((prev.kind == "name" and p not in KEYWORDS) or p in _CLOSE
                           or prev.offset in self.angle_close):
            return ""
        if t in ("=", ":"):
            return "" if inside else " "
        if p == "=":
            return "" if inside else " "
        return " "

    # ------------------------------------------------------------ aligned columns
    def _align_statements(self) -> None:
        groups: list[list[int]] = []
        open_groups: dict[tuple[str, int], list[int]] = {}
        depth = 0
        for ln, line in enumerate(self.out, start=1):
            if line.kind in ("blank", "comment", "verbatim"):
                groups += open_groups.values()
                open_groups = {}
            toks = self.by_line.get(ln, [])
            if not toks or line.kind == "verbatim":
                depth += sum(t.text == "{" for t in toks) - sum(t.text == "}" for t in toks)
                continue
            here = depth - (toks[0].text == "}")
            s = self.starts.get(ln)
            if s is not None:
                for key in [k for k in open_groups if k[1] != here]:
                    groups.append(open_groups.pop(key))
                if type(s).__name__ in _POINTS:
                    open_groups.setdefault((type(s).__name__, here), []).append(ln)
            depth += sum(t.text == "{" for t in toks) - sum(t.text == "}" for t in toks)
        groups += open_groups.values()
        for group in groups:
            self._align_group(group)

    def _points(self, ln: int) -> dict[str, int]:
        """Token indices of a statement line's alignment points."""
        s, toks = self.starts[ln], self.by_line[ln]
        role = s.role_span if isinstance(s, ast.TensorDecl) else None
        points: dict[str, int] = {}
        depth = 0
        for i, t in enumerate(toks):
            if role is not None and (t.line, t.col) == (role.line, role.col):
                points["role"] = i
            elif depth == 0 and t.text == ":" and not points:
                points[":"] = i
            elif depth == 0 and t.text == "=" and "=" not in points and \
                    (role is None or "role" in points):
                points["="] = i
            if t.text in _OPEN or t.offset in self.angle_open:
                depth += 1
            elif t.text in _CLOSE or t.offset in self.angle_close:
                depth -= 1
        return {k: v for k, v in points.items() if k in _POINTS[type(s).__name__]}

    def _align_group(self, group: list[int]) -> None:
        """Keep each column that consecutive lines of the group share in the input, moved
        right as far as the longest of them needs."""
        points = {ln: self._points(ln) for ln in group}
        indent = {ln: self.by_line[ln][0].col for ln in group}
        for name in _POINTS[type(self.starts[group[0]]).__name__]:
            runs: list[tuple[int, list[int]]] = []  # (input column, lines)
            last = None
            for ln in group:
                col = None
                if name in points[ln]:
                    col = self.by_line[ln][points[ln][name]].col - indent[ln]
                    if col == last:
                        runs[-1][1].append(ln)
                    else:
                        runs.append((col, [ln]))
                last = col
            for chosen, run in (r for r in runs if len(r[1]) > 1):
                cols = {ln: self._layout(self.by_line[ln], self.out[ln - 1].extras, [], 0)[1]
                        [points[ln][name]] for ln in run}
                target = max(chosen, *cols.values())
                for ln in run:
                    extras, i = self.out[ln - 1].extras, points[ln][name]
                    extras[i] = extras.get(i, 0) + target - cols[ln]

    # ------------------------------------------------------------ rendering
    def _render(self) -> None:
        stack: list[_Open] = []
        depth = stmt_indent = 0
        for ln, line in enumerate(self.out, start=1):
            toks = self.by_line.get(ln, [])
            comment = self.comments.get(ln)
            if comment is not None and line.kind != "verbatim":
                line.comment, line.comment_col = comment.text.rstrip(_BLANKS), comment.col - 1
            if line.kind == "verbatim":
                self._layout(toks, {}, stack, 0)
            elif line.kind == "comment":
                line.code = " " * (self._continuation(stack, None, stmt_indent) if stack
                                   else depth * INDENT)
            elif line.kind == "shape":
                line.stmt_indent = stmt_indent
            elif line.kind == "code":
                if ln in self.starts or not (stack or ln in self.continued):
                    indent = (depth - (toks[0].text == "}")) * INDENT
                    if ln in self.starts:
                        stmt_indent = indent
                else:
                    indent = self._continuation(stack, toks[0], stmt_indent)
                text, _ = self._layout(toks, line.extras, stack, indent)
                line.code = " " * indent + text
            depth += sum(t.text == "{" for t in toks) - sum(t.text == "}" for t in toks)

    def _continuation(self, stack: list[_Open], first: Token | None, stmt_indent: int) -> int:
        if not stack:
            return stmt_indent + INDENT
        top = stack[-1]
        if first is not None and (first.text in _CLOSE or first.offset in self.angle_close):
            return top.indent
        return top.indent + INDENT if top.ends_line else top.col

    # ------------------------------------------------------------ trailing comments
    def _align_comments(self) -> None:
        paragraph: list[_Line] = []
        for line in self.out + [_Line("blank")]:
            if line.kind in ("blank", "comment", "verbatim"):
                _align_paragraph(paragraph)
                paragraph = []
            else:
                paragraph.append(line)


def _align_paragraph(lines: list[_Line]) -> None:
    """Trailing comments of a paragraph in one column: the one most of them are in already
    (so a file keeps the column its author chose) when it aligns ALIGNED_SHARE of them,
    else the leftest that does, else the one that aligns the most. A comment is aligned
    where its code ends at least COMMENT_GAP before the column and its line stays within
    LINE_LIMIT; any other follows its code."""
    trailing = [ln for ln in lines if ln.kind == "code" and ln.comment is not None]
    shapes = [ln for ln in lines if ln.kind == "shape"]

    def fits(ln: _Line, col: int) -> bool:
        return col + len(ln.comment) <= LINE_LIMIT and \
            (ln.kind == "shape" or len(ln.code) + COMMENT_GAP <= col)

    column = None
    if trailing:
        counts = Counter(ln.comment_col for ln in trailing + shapes
                         if fits(ln, max(ln.comment_col, len(ln.code) + COMMENT_GAP)))
        kept = max(counts, key=lambda c: (counts[c], c)) if counts else None
        # a shape line stays deeper than its statement, or it would not read as its
        # continuation the next time
        floor = max([0, *(ln.stmt_indent + INDENT for ln in shapes)])
        needs = {len(ln.code) + COMMENT_GAP for ln in trailing} | {floor}
        candidates = sorted(c for c in needs | {kept} if c is not None and c >= floor)
        score = {c: sum(fits(ln, c) for ln in trailing + shapes) for c in candidates}
        enough = [c for c in candidates if score[c] >= ALIGNED_SHARE * len(trailing + shapes)]
        if kept in enough:
            column = kept
        elif enough:
            column = enough[0]
        else:
            column = max((c for c in candidates if c in needs), key=lambda c: (score[c], -c))
            column = column if score[column] else None
    for ln in shapes:
        ln.code = " " * (column if column is not None and fits(ln, column) else
                         max(ln.comment_col, ln.stmt_indent + INDENT))
    for ln in trailing:
        ln.gap = column - len(ln.code) if column is not None and fits(ln, column) \
            else COMMENT_GAP


def _roles(tokens: list[Token]) -> tuple[set[int], set[int], set[int]]:
    """Offsets of unary minus signs and of the `<` and `>` of type brackets."""
    unary, opens, closes = set(), set(), set()
    stack: list[str] = []
    prev = None
    for tok in tokens:
        if tok.kind == "comment":
            continue
        t = tok.text
        if t == "-" and (prev is None or (prev.text in _BEFORE_UNARY and
                                          prev.offset not in closes)):
            unary.add(tok.offset)
        if t == "<" and prev is not None and prev.text in ANGLE_TYPES:
            opens.add(tok.offset)
            stack.append("<")
        elif t == ">" and stack and stack[-1] == "<":
            closes.add(tok.offset)
            stack.pop()
        elif t in _OPEN:
            stack.append(t)
        elif t in _CLOSE and stack:
            stack.pop()
        prev = tok
    return unary, opens, closes
