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
    rm = _manager(tmp_path, 100)         # follower 1 never fetched: every ISR shrinks to [0]
    sent = []

    async def fake_send(changes):
        sent.append(list(changes))
    rm.isr_candidates |= set(rm.led)
    with trio.move_on_after(0.55):
        await housekeeping.isr_loop(rm, 8000, lambda b: True, fake_send)
    assert [len(s) for s in sent] == [40, 40, 20]
    assert sorted((c.topic, c.partition) for s in sent for _, c in s) == sorted(rm.led)
    assert all(c.new_isr == (0,) for s in sent for _, c in s)


async def test_isr_changes_of_partitions_written_with_a_short_isr_go_first(
        tmp_path, autojump_clock, monkeypatch):
    """A producer waiting on a partition (acks=all refused or short of copies) should not wait
    for the ISR changes of thousands of idle ones: urgent partitions go in the next request,
    also when they became ready while the requests before it were out."""
    monkeypatch.setattr(housekeeping, "ALTER_PARTITION_MAX", 40)
    rm = _manager(tmp_path, 100)         # follower 1 never fetched: every ISR shrinks to [0]
    rm.isr_candidates |= set(rm.led)
    rm.isr_urgent = {("t", 97), ("t", 55)}
    sent, hit = [], []

    async def fake_send(chunk):
        sent.append([c.partition for _, c in chunk])
        if len(sent) == 1:          # a producer hits a partition not proposed yet meanwhile
            hit.append(max(set(range(100)) - set(sent[0])))
            rm.isr_urgent.add(("t", hit[0]))
    with trio.move_on_after(0.55):
        await housekeeping.isr_loop(rm, 8000, lambda b: True, fake_send)
    assert sorted(sent[0][:2]) == [55, 97]
    assert sent[1][0] == hit[0] and hit[0] not in sent[1][1:] + sent[2]
    assert sorted(p for s in sent for p in s) == list(range(100))


def test_a_write_with_acks_all_and_a_short_isr_marks_the_partition_urgent(tmp_path):
    rm = ReplicaManager(0, lambda t, p, cfg: PartitionLog(str(tmp_path / f"{t}-{p}"), LogConfig()))
    rm.apply_partition("t", None, 0, [0, 1], [0], 0, 1, 1, {}, 2, 0)        # ISR short
    rm.apply_partition("t", None, 1, [0, 1], [0, 1], 0, 1, 1, {}, 2, 0)     # ISR full
    batch = build_batch([(None, b"v", [], 0)])
    assert rm.append_records("t", 0, batch, 1, 0).error == 0
    assert rm.isr_urgent == set()                    # acks=1 asks for no copies
    assert rm.append_records("t", 0, batch, -1, 0).error == 19      # NOT_ENOUGH_REPLICAS
    assert rm.append_records("t", 1, batch, -1, 0).error == 0
    assert rm.isr_urgent == {("t", 0)}


async def test_an_isr_change_is_computed_just_before_its_request(tmp_path, autojump_clock,
                                                                monkeypatch):
    """Each AlterPartition waits for the one before (seconds apiece at 30,000 partitions); a
    change computed before the metadata moved the partition on would only be refused."""
    monkeypatch.setattr(housekeeping, "ALTER_PARTITION_MAX", 40)
    rm = _manager(tmp_path, 100)
    rm.isr_candidates |= set(rm.led)
    sent = []

    replaced: list = []

    async def fake_send(chunk):
        if not sent:     # while the first is out, the controller moves ten partitions away
            later = sorted(set(range(100)) - {c.partition for _, c in chunk})
            replaced.extend(later[:15])              # and shrinks five ISRs itself
            for p in later[:10]:
                rm.apply_partition("t", None, p, [0, 1], [0, 1], 1, 2, 2, {}, 1, 0)
            for p in later[10:15]:
                rm.apply_partition("t", None, p, [0, 1], [0], 0, 1, 2, {}, 1, 0)
        sent.append([c.partition for _, c in chunk])
    with trio.move_on_after(0.55):
        await housekeeping.isr_loop(rm, 8000, lambda b: True, fake_send)
    assert len(sent) == 3 and len(replaced) == 15
    assert sorted(p for s in sent for p in s) == sorted(set(range(100)) - set(replaced))


async def test_a_change_refused_is_not_sent_again_before_the_next_tick(tmp_path, autojump_clock,
                                                                       monkeypatch):
    """An uncertain answer flags the change to be sent again (a candidate): not at once, in a
    loop against the controller, even for a partition a producer waits on."""
    monkeypatch.setattr(housekeeping, "ALTER_PARTITION_MAX", 40)
    rm = _manager(tmp_path, 100)
    rm.isr_candidates |= set(rm.led)
    sent = []

    async def fake_send(chunk):
        sent.append((trio.current_time(), [c.partition for _, c in chunk]))
        for hosted, _ in chunk:                      # the controller's answer was uncertain
            hosted.state.isr_change_uncertain()
            rm.isr_candidates.add((hosted.topic, hosted.partition))
            rm.isr_urgent.add((hosted.topic, hosted.partition))
    with trio.move_on_after(1.05):
        await housekeeping.isr_loop(rm, 8000, lambda b: True, fake_send)
    first_tick = [ps for t, ps in sent if t < 0.75]
    assert sorted(p for ps in first_tick for p in ps) == list(range(100))   # each once
    assert sorted(p for t, ps in sent if t >= 0.75 for p in ps) == list(range(100))
