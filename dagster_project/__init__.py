"""Flywheel Lake: the Dagster project (``definitions.py``), its engine, publisher and command line."""

import os

# pyarrow allocates with mimalloc, which commits (touches) each new 1 GiB arena whole when it
# reserves one. Ingesting the 500,000-interaction bench lake, copying its ~350 MB of lines into
# one batch then took 0.85-0.97 s instead of 0.22 s, and a 1M-line interactions ingest spent
# 8.6-9.0 s instead of 7.7-8.1 s (1.0-1.5 s more CPU). Committed as they are touched, pages cost
# what is used. mimalloc reads this once, when pyarrow loads it: set here, before any module of
# the project imports pyarrow; a value already in the environment is kept.
os.environ.setdefault("MIMALLOC_ARENA_EAGER_COMMIT", "0")
