"""What `stepc from-torch TARGET` names, and how the module is built: `FILE.py:NAME` or
`package.module:NAME` (e.g. `transformers:LlamaMLP`), where NAME is an `nn.Module` class
or a factory function returning a module; with `--hf-config CONFIG.json` a transformers
config built from that file is passed to it.

A class whose `__init__` takes `config` gets the config; its other required arguments are
taken from the config's attributes of the same name, and `eps` from `rms_norm_eps`, so
that `LlamaRMSNorm` builds from a Llama config too. A factory gets the config as its one
argument when it takes one.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys

import torch

from stepc.torch.capture import LoweringError

# constructor argument -> the config attribute that holds it, where the names differ
CONFIG_ALIASES = {"eps": "rms_norm_eps", "dim": "hidden_size", "hidden": "hidden_size"}

HOW_TO_BUILD = ("build it from a transformers config with --hf-config CONFIG.json, or name "
                "a factory FILE.py:make_model, a function that returns the module")


class BuildError(Exception):
    """The target cannot be built as given (a usage error)."""


def load_target(spec: str):
    """The class or factory `spec` names (FILE.py:NAME or package.module:NAME)."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise BuildError(f"`{spec}`: expected FILE.py:NAME or package.module:NAME (a module "
                         "class or a function returning a module)")
    if where.endswith(".py") or os.sep in where:
        mod = _import_file(where)
    else:
        try:
            mod = importlib.import_module(where)
        except ImportError as e:
            raise BuildError(f"`{where}`: cannot import it ({e}); a file is named "
                             "FILE.py") from None
        except (Exception, SystemExit) as e:
            raise LoweringError(f"importing `{where}` failed: {_why(e)}") from None
    target = _attribute(mod, name)
    if target is None and where == "transformers":
        target = _transformers_model_attr(name)
    if isinstance(target, type) and issubclass(target, torch.nn.Module):
        return target
    if inspect.isfunction(target):
        return target
    raise BuildError(f"{where} has no torch.nn.Module class or factory function `{name}`")


def _attribute(mod, name: str):
    try:
        return getattr(mod, name)
    except (Exception, SystemExit):  # a lazy module may raise anything on a missing name
        return None


def _transformers_model_attr(name: str):
    """`transformers:LlamaMLP`: a class of a model's modeling module (transformers exports
    only whole models at the top), found by the model type its name starts with."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    key = name.lower()
    for model_type in sorted(CONFIG_MAPPING_NAMES, key=len, reverse=True):
        if key.startswith(model_type.replace("_", "").replace("-", "")):
            package = model_type.replace("-", "_")
            try:
                mod = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
            except (Exception, SystemExit):
                continue
            target = _attribute(mod, name)
            if target is not None:
                return target
    return None


def _package_module(path: str) -> tuple[str, str] | None:
    """The dotted name of a file inside a package (its directories up to the first without an
    `__init__.py`), e.g. `transformers.models.llama.modeling_llama`, and the folder that holds
    the package; None outside one."""
    names = [os.path.splitext(os.path.basename(path))[0]]
    folder = os.path.dirname(os.path.abspath(path))
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        names.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return (".".join(names), folder) if len(names) > 1 else None


def _import_from_package(path: str, dotted: str, root: str):
    """The module a package file is, imported by its dotted name (so that its relative
    imports resolve; the package's folder is searched after the installed packages), when
    that name is the file; else None."""
    if root not in sys.path:
        sys.path.append(root)
    try:
        mod = importlib.import_module(dotted)
    except ModuleNotFoundError as e:
        if e.name and (dotted + ".").startswith(e.name + "."):
            return None  # the name is another package's (shadowed): import the file alone
        raise LoweringError(f"{path}: importing it as `{dotted}` failed: {_why(e)}") from None
    except (Exception, SystemExit) as e:  # a user's package may raise anything, or exit
        raise LoweringError(f"{path}: importing it as `{dotted}` failed: {_why(e)}") from None
    where = getattr(mod, "__file__", None)
    return mod if where and os.path.samefile(where, path) else None


def _import_file(path: str):
    if not os.path.isfile(path):
        raise BuildError(f"{path}: no such file")
    package = _package_module(path)
    if package is not None:
        mod = _import_from_package(path, *package)
        if mod is not None:
            return mod
    mod_name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod  # so that inspect and torch.export find its source
    try:
        spec.loader.exec_module(mod)
    except (Exception, SystemExit) as e:  # a user's file may raise anything, or exit
        sys.modules.pop(mod_name, None)
        raise LoweringError(f"{path}: importing it failed: {_why(e)}") from None
    return mod


def _why(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r}) at import"
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def load_hf_config(path: str, target):
    """A transformers config from a config.json (its `model_type`, else the one of the
    transformers module that defines `target`)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise BuildError(f"--hf-config {path}: {e.strerror}") from None
    except ValueError as e:
        raise BuildError(f"--hf-config {path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise BuildError(f"--hf-config {path}: expected a JSON object of config fields")
    try:
        import transformers
    except ImportError:
        raise BuildError("--hf-config needs transformers: pip install 'stepc[torch]'") from None
    parts = getattr(target, "__module__", "").split(".")
    model_type = data.pop("model_type", None) or (
        parts[2] if parts[:2] == ["transformers", "models"] and len(parts) > 2 else None)
    try:
        if model_type is None:
            return transformers.PretrainedConfig(**data)
        return transformers.AutoConfig.for_model(model_type, **data)
    except Exception as e:  # noqa: BLE001 - a config class validates its fields as it likes
        why = " ".join(str(e).split())  # a validation error's reason is on its later lines
        raise BuildError(f"--hf-config {path}: {type(e).__name__}: {why[:400]}") from None


def build_module(target, config=None) -> torch.nn.Module:
    """The module: `target(...)` with the arguments the config provides (see the module
    docstring)."""
    name = getattr(target, "__name__", str(target))
    fn = target.__init__ if isinstance(target, type) else target
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    if isinstance(target, type):
        params = params[1:]  # self
    params = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    kwargs = {}
    if config is not None and inspect.isfunction(target) and params:
        kwargs[params[0].name] = config
    elif config is not None:
        for p in params:
            attr = CONFIG_ALIASES.get(p.name, p.name)
            if p.name == "config":
                kwargs[p.name] = config
            elif hasattr(config, attr) and (p.default is p.empty or p.name in CONFIG_ALIASES):
                kwargs[p.name] = getattr(config, attr)
    missing = [p.name for p in params if p.default is p.empty and p.name not in kwargs]
    if missing:
        given = " (not in the config)" if config is not None else ""
        layers = ("; for decoder layers, --hf-config CONFIG.json --layers N builds the "
                  "model's first N" if "layer_idx" in missing else "")
        raise BuildError(f"`{name}` needs the argument{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)}{given}: {HOW_TO_BUILD}{layers}")
    try:
        module = target(**kwargs)
    except (Exception, SystemExit) as e:
        hint = ("is --hf-config the config of this model?" if config is not None
                else HOW_TO_BUILD)
        raise BuildError(f"building `{name}` raised {_why(e)}; {hint}") from None
    if not isinstance(module, torch.nn.Module):
        raise BuildError(f"`{name}` returned a {type(module).__name__}, not a torch.nn.Module")
    return module


def seed_transformers_weights(module: torch.nn.Module, config=None) -> None:
    """Give a transformers module built outside a pretrained model real values. transformers
    leaves the parameters its own classes declare (fused experts, routers: `torch.empty`) to
    `PreTrainedModel`'s initialisation, which a bare block never runs, so they hold whatever
    memory held. Each matrix a transformers class owns directly is drawn from
    N(0, initializer_range) (0.02 without a config), from torch's current seed; torch's own
    layers (Linear, Embedding, ...) keep their reset values, vectors (norm scales, biases)
    theirs. A module whose own class is not a transformers class (a user's subclass or
    factory) initialised itself as its author chose and is left alone."""
    if not type(module).__module__.startswith("transformers."):
        return
    std = float(getattr(config, "initializer_range", None) or 0.02)
    with torch.no_grad():
        for sub in module.modules():
            cls = type(sub)
            if not cls.__module__.startswith("transformers.") or \
                    hasattr(cls, "reset_parameters"):
                continue
            for param in sub._parameters.values():
                if param is not None and param.dim() >= 2:
                    param.normal_(0.0, std)
