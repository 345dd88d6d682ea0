"""The use case of `stepc from-torch`: a PyTorch module (a class or factory in a file or
package, a transformers config's decoder layers or whole causal LM) lowered to a `.step`
program, verified on a CPU copy of the module unless asked not to."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stepc.api import InputError

__all__ = ["Lowered", "LoweringFailed", "ModuleRefused", "TorchMissing", "lower"]

DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "i64": "int64",
          "i32": "int32"}  # --input's dtypes, as torch names them


class TorchMissing(InputError):
    """PyTorch is not installed (the torch extra)."""

    def __init__(self):
        super().__init__("`from-torch` needs PyTorch: pip install 'stepc[torch]' (the CPU "
                         "wheel: --extra-index-url https://download.pytorch.org/whl/cpu)")


class ModuleRefused(Exception):
    """The module or its build was refused (stepc.torch's BuildError or InputRefused), with
    what stepc lowers of whole models when that helps."""


class LoweringFailed(Exception):
    """The module could not be lowered, or the program did not match it (nothing is
    written)."""


@dataclass
class Lowered:
    """A lowered program; with real values asked for, its seeded example inputs and the
    traces of its external streams for them."""

    program: Any  # stepc.torch's TorchProgram
    inputs: tuple | None
    traces: dict[str, Any]

    @property
    def text(self) -> str:
        return self.program.text

    def save_weights(self, path: str) -> None:
        """The module's weights and the seeded inputs, for `stepc sim --weights`."""
        assert self.inputs is not None  # lowered with real values, as saving weights asks
        self.program.save_weights(path, *self.inputs)


def lower(spec: str | None, inputs: Sequence[tuple[str, str, list[int]]], *,
          layers: int | None = None, whole: bool = False, batch: int | None = None,
          past: int | None = None, dtype: str | None = None, hf_config: str | None = None,
          schedule: dict | None = None, seed: int = 0, verify: bool = True,
          real_values: bool = False, debug: bool = False,
          warn: Callable[[str], None] = lambda line: None) -> Lowered:
    """Lower `spec` (FILE.py:NAME or package:NAME) called with `inputs` ((name, dtype,
    shape) each), or the config's first `layers` decoder layers, or (`whole`) its causal
    LM. A missing torch raises TorchMissing, settings that do not fit InputError, a refused
    module ModuleRefused, a failed lowering LoweringFailed."""
    try:
        import torch

        from stepc.torch import InputRefused, LoweringError, VerificationError, from_torch
        from stepc.torch.build import (
            BuildError,
            build_module,
            load_hf_config,
            load_target,
            seed_transformers_weights,
        )
        from stepc.torch.capture import quiet
    except ImportError:
        raise TorchMissing() from None
    schedule = schedule or {}
    module = None
    try:
        target = load_target(spec) if spec else None
        whole_class = _whole_model_class(target) if target is not None and not inputs \
            else None
        if target is not None and not inputs and whole_class is None:
            _no_inputs(spec, target, layers, whole, batch, past, dtype)
        if whole_class is not None and not hf_config:
            raise InputError(f"{spec} is a whole causal LM: give its --hf-config CONFIG.json "
                             "(it is lowered in decode, with --batch, --past and optionally "
                             "--layers N), or its forward arguments")
        if whole or whole_class is not None:
            prog, build = _lower_whole(hf_config, layers, batch, past, dtype, schedule, debug,
                                       whole_class)
        elif layers is not None:
            prog, build = _lower_layers(hf_config, layers, batch, past, dtype, schedule, debug)
        else:
            config = load_hf_config(hf_config, target) if hf_config else None
            with torch.device("meta"), quiet(debug):
                module = build_module(target, config)
                example = _examples(torch, inputs)
            prog = from_torch(module, example, schedule=schedule, debug=debug, verify=False)

            def build(seed):
                torch.manual_seed(seed)
                cpu_module = build_module(target, config)  # the same module, real weights
                seed_transformers_weights(cpu_module, config)
                return cpu_module
        return _on_cpu(prog, build, seed, verify, real_values, debug, warn)
    except (BuildError, InputRefused) as e:
        raise ModuleRefused(f"{e}{_hint(module, e)}") from None
    except LoweringError as e:
        written = "; nothing was written" if isinstance(e, VerificationError) else ""
        raise LoweringFailed(f"{e}{written}{_hint(module, e)}") from None


def _examples(torch, args) -> tuple:
    """Meta tensors of the --input shapes (no memory); a shape torch cannot hold is an
    InputError."""
    out = []
    for name, dt, shape in args:
        try:
            out.append(torch.empty(shape, dtype=getattr(torch, DTYPES[dt])))
        except (RuntimeError, OverflowError, ValueError) as e:
            text = str(e).strip().splitlines()
            raise InputError(f"--input {name}={dt}{shape}: torch cannot make such a tensor "
                             f"({text[0] if text else type(e).__name__})") from None
    return tuple(out)


def _whole_model_class(target):
    """`target` when it is a class a causal-LM family lowers (None otherwise)."""
    from stepc.torch.hf_causal_lm import model_classes
    names = set(model_classes())
    if isinstance(target, type) and any(c.__name__ in names for c in target.__mro__):
        return target
    return None


def _no_inputs(spec, target, layers, whole, batch, past, dtype) -> None:
    """FILE.py:NAME given with no --input, and not a causal LM class: what to give."""
    from stepc.torch.hf_causal_lm import whole_model_hint
    given = [f for f, v in (("--layers", layers), ("--whole-model", whole or None),
                            ("--batch", batch), ("--past", past), ("--dtype", dtype))
             if v is not None]
    hint = whole_model_hint(target)
    if given:
        raise InputError(f"{', '.join(given)} set{'s' if len(given) == 1 else ''} the "
                         f"model --hf-config describes; {spec} is not a causal LM class "
                         "stepc lowers whole (drop it)" + (f". {hint}" if hint else ""))
    raise InputError("give the forward arguments with --input NAME=DTYPE[SHAPE]" +
                     (f". {hint}" if hint else ""))


def _lower_layers(hf_config, layers, batch, past, dtype, schedule, debug):
    """The program of the config's first `layers` decoder layers (on the meta device), and
    a function building them on the CPU with seeded weights."""
    from stepc.torch import hf_model
    config = hf_model.hf_config(hf_config)
    prog = hf_model.from_hf_config(config, layers, batch or hf_model.DEFAULT_BATCH,
                                   hf_model.DEFAULT_PAST if past is None else past, schedule,
                                   dtype or "f32", debug, verify=False)
    return prog, lambda seed: hf_model.build_stack(config, layers, "cpu", dtype or "f32",
                                                   seed=seed)


def _lower_whole(hf_config, layers, batch, past, dtype, schedule, debug, cls=None):
    """The program of the whole causal LM the config describes (`cls`, else its
    AutoModelForCausalLM) with its first `layers` decoder layers (all by default), on the
    meta device, and a function building it on the CPU with seeded weights."""
    from stepc.torch import hf_causal_lm_config as lm
    from stepc.torch.build import load_hf_config
    config = load_hf_config(hf_config, cls)  # without model_type: the class's
    prog = lm.from_hf_causal_lm(config, layers, batch or lm.DEFAULT_BATCH,
                                lm.DEFAULT_PAST if past is None else past, schedule,
                                dtype or "f32", debug, verify=False, cls=cls)
    return prog, lambda seed: lm.build_causal_lm(config, layers, "cpu", dtype or "f32",
                                                 seed=seed, cls=cls)


def _hint(module, error: Exception) -> str:
    """For a whole model that was refused: what stepc lowers of whole models (unless the
    error says it already)."""
    from stepc.torch.hf_causal_lm import whole_model_hint
    hint = whole_model_hint(module) if module is not None else ""
    return f"\n({hint})" if hint and "--layers" not in str(error) else ""


def _on_cpu(prog, build, seed: int, verify: bool, real_values: bool, debug: bool,
            warn: Callable[[str], None]) -> Lowered:
    """The program verified on a CPU copy of its module with seeded weights (`build(seed)`),
    or marked unverified, saying why (--no-verify, a module too large to run); with
    `real_values`, also that copy's seeded inputs and their traces. `warn` says when
    verification was wanted and could not run."""
    from stepc.torch.capture import quiet
    from stepc.torch.verify import too_large
    reason = too_large(prog.module) if verify else "--no-verify"
    if reason and not real_values:
        prog = prog.unverified(reason)
    else:
        with quiet(debug):
            module = build(seed)
        prog = prog.on_module(module)
        prog = prog.unverified(reason) if reason else prog.verify(seed)
    if verify and not prog.verification.verified:
        warn(f"stepc: warning: {prog.verification.summary}")
    if not real_values:
        return Lowered(prog, None, {})
    real = prog.seeded_inputs(prog.example, seed)
    return Lowered(prog, real, prog.traces(*real))
