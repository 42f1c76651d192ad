"""Metrics read from a log: the reader, runs of same-shaped lines, column tables, the cache, comparison rules."""
