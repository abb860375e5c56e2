"""specfleet.report."""
