"""Program rewrites: a checked program in, a new checked program out, printed as readable
`.step` with a comment on every statement saying where it came from, and a record of what
changed. Each rewrite is a `Rewrite` in `REWRITES`; `apply` runs one."""

from stepc.rewrite.draft import Change, RewriteError
from stepc.rewrite.run import REWRITES, Rewritten, apply

__all__ = ["REWRITES", "Change", "RewriteError", "Rewritten", "apply"]
