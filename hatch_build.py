"""The wheel's compiled part: every `stepc/**/*.pyx` built by Cython and the machine's C
compiler into an extension module beside its source (the simulator's native core).

The build backend runs `NativeHook` for each wheel. Without a C compiler (or with
`STEPC_PURE_PYTHON=1` set at install time) the wheel is pure Python and says so; stepc then
runs its Python path, which gives the same cycles, only slower.

    python hatch_build.py          # build the modules in place, in a checkout (tests do this)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# what a generated module is compiled with: bounds and wraparound are checked by the code
# itself where an index comes from outside
DIRECTIVES = {"language_level": 3, "boundscheck": False, "wraparound": False,
              "cdivision": True, "initializedcheck": False}


def sources(root: Path = ROOT) -> list[Path]:
    """The Cython sources of the package."""
    return sorted((root / "stepc").rglob("*.pyx"))


def module_name(source: Path, root: Path = ROOT) -> str:
    return ".".join(source.relative_to(root).with_suffix("").parts)


def build(out_dir: Path, root: Path = ROOT, quiet: bool = True) -> dict[str, str]:
    """Compile every source into `out_dir` (laid out as the package): {built file: its path
    in the package}. Raises when Cython or the compiler fails."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    extensions = [Extension(module_name(s, root), [str(s.relative_to(root))],
                            extra_compile_args=["-O2"]) for s in sources(root)]
    if not extensions:
        return {}
    here = os.getcwd()
    os.chdir(root)
    try:
        modules = cythonize(extensions, compiler_directives=DIRECTIVES, quiet=quiet,
                            build_dir=str(out_dir / "c"))
        dist = Distribution({"name": "stepc-native", "ext_modules": modules})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = str(out_dir / "lib")
        cmd.build_temp = str(out_dir / "tmp")
        cmd.ensure_finalized()
        cmd.run()
        return {path: str(Path(path).relative_to(out_dir / "lib"))
                for path in cmd.get_outputs()}
    finally:
        os.chdir(here)


def build_in_place(root: Path = ROOT, quiet: bool = True) -> list[str]:
    """Build the modules of a checkout beside their sources; their package paths. Each
    module takes its place by a rename, so a process running the old one keeps its copy
    (writing over a loaded module's file crashes that process)."""
    import shutil

    with tempfile.TemporaryDirectory() as tmp:
        built = build(Path(tmp), root, quiet)
        for path, rel in built.items():
            target = root / rel
            fresh = target.with_name(f".{target.name}.{os.getpid()}")
            shutil.copy2(path, fresh)
            os.replace(fresh, target)
    return sorted(built.values())


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]


class NativeHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    """Adds the compiled modules to the wheel and tags it for this interpreter."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or os.environ.get("STEPC_PURE_PYTHON") == "1":
            return
        if version == "editable":  # the package is the checkout: build beside the sources
            try:
                build_in_place(Path(self.root))
            except Exception as e:
                print(f"stepc: the native simulator core was not built ({e})", file=sys.stderr)
            return
        self._tmp = tempfile.TemporaryDirectory()
        try:
            built = build(Path(self._tmp.name), Path(self.root))
        except Exception as e:  # no compiler: the pure-Python wheel still works
            print(f"stepc: the native simulator core was not built ({e}); the wheel runs "
                  "the pure-Python simulator (same cycles, slower)", file=sys.stderr)
            return
        build_data["force_include"].update(built)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        if getattr(self, "_tmp", None) is not None:
            self._tmp.cleanup()


if __name__ == "__main__":
    for rel in build_in_place(quiet=False):
        print("built", rel)
