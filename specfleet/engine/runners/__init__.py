"""Backends behind the one `Runner` protocol; heavy imports stay inside each module."""

from specfleet.engine.runners.base import Runner, UnsupportedModelError

__all__ = ["Runner", "UnsupportedModelError"]
