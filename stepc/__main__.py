"""`python -m stepc` runs the command line."""

from stepc.cli import run

run()
