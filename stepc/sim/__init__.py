"""The cycle-approximate interpreter: kernel, operator behaviors, fabric and HBM models."""
