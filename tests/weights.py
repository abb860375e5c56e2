"""Weights files for model folders built by tests."""

# The smallest safetensors file: a header that lists no tensor. A folder holding it passes
# `folders.safetensors_problem`; loading it still fails (no tensor), as an empty file did.
EMPTY_SAFETENSORS = (2).to_bytes(8, "little") + b"{}"
