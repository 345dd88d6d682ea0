"""FIFO sizing: where a program needs deep FIFOs, how deep, and what the depths cost."""
