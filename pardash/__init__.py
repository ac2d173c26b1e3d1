"""pardash: a terminal dashboard for distributed PyTorch training."""

__version__ = "0.1.0"
