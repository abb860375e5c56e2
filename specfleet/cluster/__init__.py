"""specfleet.cluster."""
