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
