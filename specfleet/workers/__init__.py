"""specfleet.workers."""
