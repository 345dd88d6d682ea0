"""What `from_torch` lowers, as the Markdown tables of docs/torch.md, generated from the
lowering's own registries (a test keeps the document equal to them):
`python -m stepc.torch.support` rewrites the generated region."""

from __future__ import annotations

import re
from pathlib import Path

from stepc.torch import families
from stepc.torch.attention import ATTENTION_DEFAULTS
from stepc.torch.canon import LAYOUT_KINDS
from stepc.torch.dense import DENSE_PARAMS, LINEAR_KINDS
from stepc.torch.moe import _DEFAULTS as MOE_DEFAULTS
from stepc.torch.rowwise import ROWWISE_KINDS

# graphs recognised whole after capture (stepc/torch/moe.py, stepc/torch/attention.py)
RECOGNISED = {
    "router `linear -> softmax -> topk`, SwiGLU experts `[E, D, F]`, weighted combine":
    "the paper's MoE programs: `Partition` by the top-k selector, a loop over the experts "
    "running one SwiGLU graph, `Reassemble` + `Accum`",
    "decode attention as examples/torch/decode_attention.py writes it":
    "the paper's attention programs; the KV lengths are the external stream `kv_lens`",
}
SCHEDULES = [("static", "dense blocks", ", ".join(DENSE_PARAMS) + " (derived from the shapes)")]
SCHEDULES += [(t, "MoE blocks (recognised)", ", ".join(f"{k}={v}" for k, v in d.items()))
              for t, d in MOE_DEFAULTS.items()]
SCHEDULES += [(t, "decode attention (recognised)",
               ", ".join(f"{k}={v}" for k, v in d.items()))
              for t, d in ATTENTION_DEFAULTS.items()]

DOC = Path(__file__).resolve().parents[2] / "docs" / "torch.md"
BEGIN, END = "<!-- BEGIN GENERATED: support_table -->", "<!-- END GENERATED -->"


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]


def support_table() -> str:
    """Operator kinds, block families and schedules, as Markdown."""
    kinds = [(k, v) for table in (LAYOUT_KINDS, LINEAR_KINDS, ROWWISE_KINDS, RECOGNISED)
             for k, v in table.items()]
    fams = [(f.name, ", ".join(f"`{c}`" for c in f.classes) or "any, by its parts", f.kind,
             ", ".join(f.tilings), f.doc) for f in families.FAMILIES] \
        or [("(none registered)", "", "", "", "")]
    scheds = SCHEDULES + [(t, f"the {f.name} family", "see the family") for f in
                          families.FAMILIES for t in f.tilings]
    lines = ["Operators (aten kinds after capture) and what each becomes:", ""]
    lines += _table(("PyTorch", "emitted"), kinds)
    lines += ["", "Block families lowered whole, by class (moe-by-structure and "
              "decoder-by-structure: by their parts, stepc/torch/moe_structure.py and "
              "stepc/torch/hf_decoder_structure.py), before capture (stepc/torch/families.py):",
              ""]
    lines += _table(("family", "classes", "kind", "schedules", "what"), fams)
    lines += ["", "Schedules (`--schedule`) by block:", ""]
    lines += _table(("schedule", "blocks", "params"), scheds)
    return "\n".join(lines) + "\n"


def documented() -> str:
    """The generated region of docs/torch.md as it stands."""
    text = DOC.read_text()
    m = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    return m.group(1) if m else ""


def write_docs() -> None:
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + "\n" + support_table() + text[end:])


if __name__ == "__main__":
    write_docs()
