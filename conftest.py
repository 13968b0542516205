"""Suite-wide settings. Soak tests (`@pytest.mark.slow`) are deselected, not skipped, unless
RAFTKA_SOAK=1: the default run stays short and reports only tests that ran. Hypothesis runs
without per-example deadlines (below)."""

import os

import pytest
from hypothesis import settings

# Hypothesis' per-example deadline (200 ms) is a timing assertion: on a loaded 2-core CI machine
# an example that normally takes 100 ms can take 300, and the test "fails" for no reason in the
# code (seen: spark_connector/tests/test_planning.py under a full run). Property tests here check
# outcomes; their speed is measured by the benchmarks.
settings.register_profile("raftka", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "raftka"))


def pytest_collection_modifyitems(config, items):
    if os.environ.get("RAFTKA_SOAK") == "1":
        # scripts/test.sh's per-test timeout is for the default run; a soak runs for an hour
        if config.pluginmanager.hasplugin("timeout"):
            for item in items:
                if item.get_closest_marker("slow") is not None:
                    item.add_marker(pytest.mark.timeout(0))
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


@pytest.fixture(autouse=True)
def _close_partition_logs(monkeypatch):
    """Every PartitionLog a test opens is closed when the test ends. Many tests open logs on
    tmp_path and drop them (a crash is often the point); a segment's descriptor is a raw
    os.open() int that no finalizer closes, and one pytest process runs the whole suite:
    hundreds of leaked descriptors pushed later sockets past 1024, where select()-based code
    (py4j's callback server in the Spark tests) cannot work. Strong references, for that reason."""
    from partition_server.log import PartitionLog
    opened: list[PartitionLog] = []
    init = PartitionLog.__init__

    def tracking_init(self, *args, **kwargs):
        opened.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(PartitionLog, "__init__", tracking_init)
    yield
    for plog in opened:
        if getattr(plog, "closed", True):
            continue
        try:
            plog.close(sync=False)
        except Exception:          # noqa: BLE001 - a test may have left it broken on purpose
            pass


NODE_LOG_LINES = 25            # notable lines per node log shown with a failed test
_NOTABLE = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback", "Error:", "Exception:")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report gets the warnings and errors its live nodes logged while it ran:
    CI keeps only pytest's output, and the cluster's logs are gone with the machine (a node can
    fail a request without dying, which LiveCluster.unexpected_exits cannot show)."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    try:
        base = item.config._tmp_path_factory.getbasetemp()
    except Exception:          # noqa: BLE001 - no tmp dirs made: no live nodes either
        return
    started = call.start
    sections = []
    for path in sorted(base.glob("**/logs/*.log")):
        try:
            if path.stat().st_mtime < started:
                continue
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        notable = [line for line in lines if any(mark in line for mark in _NOTABLE)]
        if notable:
            sections.append(f"--- {path.relative_to(base)}: {len(notable)} notable lines, "
                            f"the last {min(len(notable), NODE_LOG_LINES)}:\n" +
                            "\n".join(line[:300] for line in notable[-NODE_LOG_LINES:]))
    if sections:
        report.sections.append(("node logs (warnings and errors)", "\n".join(sections)))
