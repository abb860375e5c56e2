"""specfleet.cli."""
