"""Symbolic off-chip traffic, on-chip memory, FLOPs and operational intensity."""

from stepc.analyze.analysis import Analysis, OpCost, analyze, roofline, roofline_terms
from stepc.analyze.bindings import trace_bindings

__all__ = ["Analysis", "OpCost", "analyze", "roofline", "roofline_terms",
           "trace_bindings"]
