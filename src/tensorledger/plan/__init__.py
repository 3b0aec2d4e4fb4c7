"""Planning: accumulation, checkpointing, layout search."""
