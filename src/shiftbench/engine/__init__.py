"""Engines: generate shifted datasets, evaluate models, store results."""

# samples per unit of the ray engine (rounded down to whole batches, at least one): evaluate and retrieval
# use it, the CLI names it in its help and dry run (defined here, not in engines.py: the CLI starts fast)
DEFAULT_SHARD = 256
