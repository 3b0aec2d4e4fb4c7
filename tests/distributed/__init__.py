"""Sharded layouts traced on one rank of a fake process group, and checked on real ones."""
