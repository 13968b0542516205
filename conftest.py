"""Soak tests (`@pytest.mark.slow`) are deselected, not skipped, unless RAFTKA_SOAK=1: the
default run stays under a few minutes and reports only tests that ran."""

import os


def pytest_collection_modifyitems(config, items):
    if os.environ.get("RAFTKA_SOAK") == "1":
        return
    kept = [item for item in items if item.get_closest_marker("slow") is None]
    dropped = [item for item in items if item.get_closest_marker("slow") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_unconfigure(config):
    """The summary is printed by now. librdkafka clients that a failing test could not close
    keep logging connection errors to stderr (from their own threads) until the process exits,
    and CI keeps only the tail of the log: silence them so the summary is what it shows. Now,
    and again at exit, because pytest puts back the stderr it captured after this hook."""
    import atexit
    import sys

    def silence():
        sys.stderr.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    silence()
    atexit.register(silence)
