"""clipflow: distributed training of video models, from cluster to report."""

__version__ = "0.1.0"
