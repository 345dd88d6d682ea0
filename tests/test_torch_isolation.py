"""The core of stepc never imports torch: `import stepc` and `stepc check` leave it out of
`sys.modules` (only `stepc from-torch` and `stepc.torch` load it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_and_check_do_not_import_torch():
    code = (
        "import sys\n"
        "import stepc\n"
        "from click.testing import CliRunner\n"
        "from stepc.cli import main\n"
        "r = CliRunner().invoke(main, ['check', 'programs/swiglu.step'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
