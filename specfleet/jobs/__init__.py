"""specfleet.jobs."""
