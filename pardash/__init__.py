"""pardash: a terminal dashboard for distributed PyTorch training."""

__version__ = "0.1.0"
"""Every rank's hello names it (schema.Hello.pardash_version), and ``report --compare`` judges two
runs' self and comm times only where their logs name the same one: bump it (and pyproject.toml's)
with any change to what a logged figure means, as SCHEMA_VERSION is bumped for a field's."""
