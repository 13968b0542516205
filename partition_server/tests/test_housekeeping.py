"""The broker's periodic jobs (partition_server/housekeeping.py): bounded work per tick."""

import types

import trio

from partition_server import housekeeping
from partition_server.broker import Broker
from partition_server.housekeeping import Sweep
from partition_server.log import LogConfig, PartitionLog
from partition_server.log.offset_checkpoint import read_checkpoint
from partition_server.replica_manager import ReplicaManager
from wire.records.batch import build_batch


def test_sweep_visits_every_key_once_per_period_in_slices():
    keys = {f"k{i}" for i in range(100)}
    s = Sweep(lambda: sorted(keys), period_s=10, tick_s=1)
    seen = []
    for _ in range(10):
        part = s.next_slice()
        assert len(part) == 10
        seen += part
    assert sorted(seen) == sorted(keys)
    keys.add("new")                                  # joins on the next pass
    assert "new" in sum((s.next_slice() for _ in range(11)), [])
    assert Sweep(lambda: [], 10, 1).next_slice() == []


def _manager(tmp_path, n):
    rm = ReplicaManager(0, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"), LogConfig()))
    for p in range(n):
        rm.apply_partition("t", None, p, [0, 1], [0, 1], 0, 1, 1, {}, 1, 0)
    return rm


def test_high_watermark_checkpoint_is_written_only_when_one_changed(tmp_path):
    rm = _manager(tmp_path, 3)
    path = str(tmp_path / "replication-offset-checkpoint")
    from partition_server.log_dirs import LogDirs
    # one log directory: it checkpoints its own logs
    fake = types.SimpleNamespace(replicas=rm, hw_checkpoint_path=path,
                                 log_dirs=LogDirs([str(tmp_path)], 1))
    Broker.checkpoint_high_watermarks(fake, force=False)
    assert read_checkpoint(path) == {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    (tmp_path / "replication-offset-checkpoint").unlink()
    Broker.checkpoint_high_watermarks(fake, force=False)     # nothing changed: not written
    assert not (tmp_path / "replication-offset-checkpoint").exists()
    # replica 1 fetches past a new record: partition 1's high watermark moves to 1
    assert rm.append_records("t", 1, build_batch([(None, b"v", [], 0)]), 1, 0).error == 0
    rm.read("t", 1, 1, 1 << 20, 1, 1, -1, 0, min_one=True)
    assert rm.get("t", 1).state.high_watermark == 1
    Broker.checkpoint_high_watermarks(fake, force=False)
    assert read_checkpoint(path) == {("t", 0): 0, ("t", 1): 1, ("t", 2): 0}
    (tmp_path / "replication-offset-checkpoint").unlink()
    Broker.checkpoint_high_watermarks(fake, force=False)
    assert not (tmp_path / "replication-offset-checkpoint").exists()
    Broker.checkpoint_high_watermarks(fake)                  # shutdown: always written
    assert read_checkpoint(path)[("t", 1)] == 1


async def test_isr_tick_checks_a_slice_of_the_led_partitions_and_flagged_ones(tmp_path,
                                                                              autojump_clock,
                                                                              ):
    rm = _manager(tmp_path, 100)
    checked = []
    for key, hosted in rm.partitions.items():
        real = hosted.state.isr_change_needed

        def spy(now, lag, eligible=None, key=key, real=real):
            checked.append(key)
            return real(now, lag, eligible)
        hosted.state.isr_change_needed = spy
    sent = []

    async def fake_send(changes):
        sent.extend(changes)
    rm.isr_candidates.add(("t", 99))
    with trio.move_on_after(0.55):                   # one tick: 0.5 s of a 2 s sweep
        await housekeeping.isr_loop(rm, 8000, lambda b: True, fake_send)
    # a quarter of the sweep (25), plus the flagged partition unless the slice held it already
    assert len(checked) in (25, 26) and ("t", 99) in checked and not rm.isr_candidates
    checked.clear()
    with trio.move_on_after(2.05):                   # a whole sweep: every led partition
        await housekeeping.isr_loop(rm, 8000, lambda b: True, fake_send)
    assert set(checked) == set(rm.led) and len(rm.led) == 100


async def test_no_isr_change_is_proposed_before_the_first_metadata_catch_up_is_applied(
        tmp_path, autojump_clock):
    """A restarted broker's image is the one before the restart (other brokers usable, stale
    leaderships): its ISR proposals wait for the catch-up, as Kafka's broker publishes no
    metadata before it."""
    rm = _manager(tmp_path, 4)
    checked = []
    for key, hosted in rm.partitions.items():
        hosted.state.isr_change_needed = lambda now, lag, eligible=None, key=key: \
            checked.append(key)
    pokes = []
    fake = types.SimpleNamespace(
        serving=trio.Event(), _serve_from=None,
        unfenced_once=trio.Event(), client=types.SimpleNamespace(
            image=types.SimpleNamespace(offset=10), caught_up=False, fenced=True,
            ready_to_unfence=False, heartbeat_soon=lambda: pokes.append(1)),
        image=types.SimpleNamespace(offset=5), replicas=rm,
        config={"replica.lag.time.max.ms": 8000}, isr_eligible=lambda b: True, broker_id=0,
        purgatory=None)
    fake.caught_up_applied = lambda: Broker.caught_up_applied(fake)
    fake._maybe_serve = lambda: Broker._maybe_serve(fake)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(Broker._isr_loop, fake)
        await trio.sleep(5)
        assert checked == []
        fake.client.caught_up = True            # replayed up to offset 10, applied only 5
        Broker.on_heartbeat_state(fake)
        await trio.sleep(5)
        assert checked == [] and not fake.serving.is_set()
        assert not fake.client.ready_to_unfence and pokes == []
        fake.image.offset = 10                  # what on_image does last
        Broker._maybe_serve(fake)
        assert fake.serving.is_set() and fake.client.ready_to_unfence and pokes == [1]
        await trio.sleep(2.1)
        assert set(checked) == set(rm.led)
        nursery.cancel_scope.cancel()


async def test_thousands_of_isr_changes_go_in_bounded_requests(tmp_path, autojump_clock,
                                                              monkeypatch):
    """The controller handles one AlterPartition in one step of its loop: thousands of changes
    (a restarted broker rejoining every ISR) go as several requests, one after another."""
    monkeypatch.setattr(housekeeping, "ALTER_PARTITION_MAX", 40)
    rm = _manager(tmp_path, 100)
    for key, hosted in rm.partitions.items():
        hosted.state.isr_change_needed = lambda now, lag, eligible=None, key=key: key
    sent = []

    async def fake_send(changes):
        sent.append(list(changes))
    rm.isr_candidates |= set(rm.led)
    with trio.move_on_after(0.55):
        await housekeeping.isr_loop(rm, 8000, lambda b: True, fake_send)
    assert [len(s) for s in sent] == [40, 40, 20]
    assert sorted(change for s in sent for _, change in s) == sorted(rm.led)
