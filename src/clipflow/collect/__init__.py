"""Bringing a run's files home from its hosts, each copy checked against the checksum its writer recorded."""
