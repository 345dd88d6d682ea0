"""stepc: the toolchain for Streaming Tensor Programs (STeP, ASPLOS '26)."""

__version__ = "0.1.0"
