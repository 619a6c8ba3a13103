"""Stage 6, report: a run's evaluation, training curves, throughput, cluster and data in one HTML page."""
