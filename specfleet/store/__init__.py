"""specfleet.store."""
