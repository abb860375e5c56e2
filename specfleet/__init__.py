"""specfleet: prompt-lookup speculative decoding across a fleet, with every measurement kept."""

from specfleet.openblas import import_hook

__version__ = "0.1.0"

# MLX's CPU backend on Linux runs on OpenBLAS when this process imports it (openblas.py).
import_hook()
