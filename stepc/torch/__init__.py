"""From PyTorch to STeP: `from_torch(module, example_inputs, schedule=...)` lowers a module
to a readable, tiled `.step` program (`stepc from-torch` on the command line);
`from_hf_config(config, layers=N)` the first N decoder layers of a transformers model,
`from_hf_causal_lm(config)` the whole causal LM.

Only this package imports torch (the `torch` extra); the rest of stepc never does.
"""

from __future__ import annotations

from stepc.torch.capture import InputRefused, LoweringError
from stepc.torch.lowering import TorchProgram, from_torch, load_module
from stepc.torch.verify import VerificationError


def from_hf_config(config, layers: int = 1, *settings, **named) -> TorchProgram:
    """The first `layers` decoder layers of the model a transformers config describes, as
    one program (stepc.torch.hf_model.from_hf_config: batch, past, schedule, dtype)."""
    from stepc.torch.hf_model import from_hf_config as lower
    return lower(config, layers, *settings, **named)


def from_hf_causal_lm(config, layers: int | None = None, *settings, **named) -> TorchProgram:
    """The whole causal LM a transformers config describes (with its first `layers` decoder
    layers), one decode step, as one program (stepc.torch.hf_causal_lm_config: batch,
    past, schedule, dtype)."""
    from stepc.torch.hf_causal_lm_config import from_hf_causal_lm as lower
    return lower(config, layers, *settings, **named)


def support_table() -> str:
    """What `from_torch` lowers (operator kinds, block families, schedules), as the
    Markdown tables of docs/torch.md."""
    from stepc.torch.support import support_table as table
    return table()


__all__ = ["InputRefused", "LoweringError", "TorchProgram", "VerificationError",
           "from_hf_causal_lm", "from_hf_config", "from_torch", "load_module", "support_table"]
