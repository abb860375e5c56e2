"""specfleet: prompt-lookup speculative decoding across a fleet, with every measurement kept."""

__version__ = "0.1.0"
