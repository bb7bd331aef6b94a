"""Flywheel Lake: the Dagster project (``definitions.py``), its engine, publisher and command line."""

import atexit
import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# pyarrow allocates with mimalloc, which commits (touches) each new 1 GiB arena whole when it
# reserves one. Ingesting the 500,000-interaction bench lake, copying its ~350 MB of lines into
# one batch then took 0.85-0.97 s instead of 0.22 s, and a 1M-line interactions ingest spent
# 8.6-9.0 s instead of 7.7-8.1 s (1.0-1.5 s more CPU). Committed as they are touched, pages cost
# what is used. mimalloc reads this once, when pyarrow loads it: set here, before any module of
# the project imports pyarrow; a value already in the environment is kept.
os.environ.setdefault("MIMALLOC_ARENA_EAGER_COMMIT", "0")


@contextmanager
def uncollected() -> Iterator[None]:
    """Python's cyclic garbage collector off while the block imports the pipeline (Dagster, Great
    Expectations, DuckDB's and pyarrow's bindings), then what it created frozen (``gc.freeze``).

    Those ~250,000 objects live as long as the process, yet the collector walked them
    over and over while they were being created (four full collections) and again in every
    later full one: 0.37 s of CPU per run on the bench's 1M lake, no-op or not, of which
    0.05-0.06 s is left (the no-op 3.74 -> 3.42 s and the +1% run 5.58 -> 5.10 s, medians of six
    rounds interleaved with the code before). The import leaves ~650 objects of cyclic garbage,
    frozen with the rest until exit: collecting them first would cost a full collection (0.15 s).
    Process entry points use it (``flywheel run``, the bench's phases), and only the first
    import of Dagster in a process pauses the collector: a process that imported it before is
    left as it is, as is a collector someone else turned off (a test process whose first run of
    the command is in process freezes what it holds then, its cyclic garbage included, until
    exit). The run itself collects as usual. At exit the frozen objects are handed back to the
    collector, so they are finalised as usual (nanobind reports DuckDB's as leaked otherwise)."""
    if "dagster" in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
        atexit.register(gc.unfreeze)
