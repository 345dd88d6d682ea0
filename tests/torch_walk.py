"""A walk over transformers' model library for `stepc from-torch`: every MLP, norm, MoE,
attention and decoder-layer class of a `models/<type>/modeling_<type>.py` whose config builds
small, run through the command as a user runs it (`--hf-config`, decode-shaped inputs for
attention and decoder layers), each outcome counted by exit code.

    python tests/torch_walk.py [--limit N] [--kinds mlp,moe] [--show 70]

prints the counts per kind and outcome and the cases of the outcomes asked for.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import json
import os
import pkgutil
import tempfile
from collections import Counter
from dataclasses import dataclass

SMALL = {  # a config's sizes, where it has the field: every block builds in milliseconds
    "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 128,
    "num_local_experts": 4, "num_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "max_position_embeddings": 256, "n_group": 1, "topk_group": 1, "kv_lora_rank": 16,
    "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "first_k_dense_replace": 0, "sliding_window": 64,
}
KINDS = {  # class name endings -> kind
    "MLP": "mlp", "RMSNorm": "norm", "LayerNorm": "norm", "SparseMoeBlock": "moe", "MoE": "moe",
    "Moe": "moe", "Attention": "attention", "DecoderLayer": "decoder",
}
TOKENS, BATCH, PAST = 4, 2, 8
INTERNAL = 70  # what `stepc` exits with when an exception escapes a command


@dataclass
class Case:
    model_type: str
    target: str  # package.module:Class
    kind: str
    config: dict

    def inputs(self) -> list[str]:
        """`--input` values: a token block for MLPs, norms and MoEs, a decode step for
        attention and decoder layers (hidden, stacked rotary embeddings, the mask)."""
        d = self.config.get("hidden_size", 64)
        if self.kind in ("attention", "decoder"):
            head = self.config.get("head_dim") or d // self.config.get("num_attention_heads", 4)
            return [f"hidden_states=f32[{BATCH},1,{d}]",
                    f"position_embeddings=f32[2,{BATCH},1,{head}]",
                    f"attention_mask=f32[{BATCH},1,1,{PAST + 1}]"]
        return [f"hidden_states=f32[1,{TOKENS},{d}]"]


def _small_config(config_class) -> dict | None:
    try:
        defaults = config_class().to_dict()
    except Exception:  # noqa: BLE001 - a config that needs arguments is not walked
        return None
    small = {**defaults, **{k: v for k, v in SMALL.items() if k in defaults}}
    for key in ("layer_types", "mlp_layer_types"):  # one entry per layer
        if isinstance(defaults.get(key), list) and defaults[key]:
            small[key] = defaults[key][:small.get("num_hidden_layers", 2)]
    return small


def cases(kinds: set[str] | None = None) -> list[Case]:
    """The walk's cases, in a stable order."""
    import transformers.models as models
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    out = []
    for info in sorted(pkgutil.iter_modules(models.__path__), key=lambda i: i.name):
        model_type = info.name
        if model_type not in CONFIG_MAPPING:
            continue
        try:
            modeling = importlib.import_module(
                f"transformers.models.{model_type}.modeling_{model_type}")
        except Exception:  # noqa: BLE001 - a model whose extra dependency is missing
            continue
        config = _small_config(CONFIG_MAPPING[model_type])
        if config is None:
            continue
        for name, cls in sorted(vars(modeling).items()):
            if not inspect.isclass(cls) or cls.__module__ != modeling.__name__:
                continue
            kind = next((k for end, k in KINDS.items() if name.endswith(end)), None)
            if kind and (kinds is None or kind in kinds):
                out.append(Case(model_type, f"{modeling.__name__}:{name}", kind, config))
    return out


FACTORY = """import json
import transformers
from {module} import {name}


def make_model():
    with open({config!r}) as f:
        data = json.load(f)
    data.pop("model_type", None)
    return {name}(transformers.AutoConfig.for_model({model_type!r}, **data), layer_idx=0)
"""


def run_case(case: Case, folder: str) -> tuple[int, str]:
    """The exit code and output of `stepc from-torch` on the case, in this process: built
    from `--hf-config`, or, for a class that takes a `layer_idx`, by a factory file that
    builds layer 0 (as docs/torch.md has a user do)."""
    from click.testing import CliRunner

    from stepc.cli import main

    config = os.path.join(folder, f"{case.model_type}.json")
    if not os.path.exists(config):
        with open(config, "w") as f:
            json.dump(case.config, f, default=str)
    module, _, name = case.target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if "layer_idx" in inspect.signature(cls.__init__).parameters:
        factory = os.path.join(folder, f"factory_{name.lower()}.py")
        with open(factory, "w") as f:
            f.write(FACTORY.format(module=module, name=name, config=config,
                                   model_type=case.model_type))
        args = ["from-torch", f"{factory}:make_model"]
    else:
        args = ["from-torch", case.target, "--hf-config", config]
    for value in case.inputs():
        args += ["--input", value]
    out = os.path.join(folder, "out.step")
    with contextlib.suppress(FileNotFoundError):
        os.remove(out)
    with contextlib.redirect_stderr(io.StringIO()):
        result = CliRunner().invoke(main, args + ["-o", out])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return INTERNAL, (f"{result.output}\ninternal error: "
                          f"{type(result.exception).__name__}: {result.exception}")
    return result.exit_code, result.output


def walk(limit: int | None = None, kinds: set[str] | None = None):
    """(case, exit code, output) of every case (the first `limit`)."""
    with tempfile.TemporaryDirectory() as folder:
        for case in cases(kinds)[:limit]:
            code, text = run_case(case, folder)
            yield case, code, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int)
    ap.add_argument("--kinds", help="comma-separated: " + ", ".join(sorted(set(KINDS.values()))))
    ap.add_argument("--show", action="append", type=int, default=[],
                    help="print the cases of this exit code (repeatable)")
    args = ap.parse_args()
    counts: Counter = Counter()
    for case, code, text in walk(args.limit, set(args.kinds.split(",")) if args.kinds else None):
        counts[(case.kind, code)] += 1
        if code in args.show:
            print(f"--- {case.target} -> {code}\n{text.strip()[-600:]}", flush=True)
    for (kind, code), n in sorted(counts.items()):
        print(f"{kind:10s} exit {code:3d}: {n}")


if __name__ == "__main__":
    main()
