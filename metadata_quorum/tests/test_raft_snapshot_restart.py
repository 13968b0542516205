"""A restart between pysyncobj's snapshot and its compaction step keeps the entries after the
snapshot (issue 17: restarts always work).

pysyncobj writes its dump (in a thread: quorum/snapshot_writer.py), and only on a later tick
drops the journal entries the dump covers. A process stopped in between restarts with a journal that begins *before* the dump. pysyncobj then clears the
journal down to the dump's last two entries, and every committed entry after the dump is gone:
seen as controllers disagreeing after a full restart of the metadata-scale test under load.
DurableJournal.align_to_snapshot drops only what the dump covers."""

import os
import shutil
import time

from metadata_quorum import records as r
from metadata_quorum.quorum.journal import DurableJournal
from metadata_quorum.quorum.raft import RaftQuorum
from partition_server.testing import free_base_port

CONFIG = (2, "t")          # ConfigRecord resource of the entries below


def entry(idx: int, term: int = 1) -> tuple:
    return (b"command-%d" % idx, idx, term)


def journal_with(path, entries) -> DurableJournal:
    j = DurableJournal(str(path))
    for e in entries:
        j.add(*e)
    j.sync()
    return j


def test_a_journal_that_begins_before_the_snapshot_is_cut_to_it_and_keeps_the_rest(tmp_path):
    j = journal_with(tmp_path / "raft.log", [entry(i) for i in range(1, 71)])
    assert j.align_to_snapshot(entry(52), entry(53))
    assert [e[1] for e in j] == list(range(52, 71))
    j._destroy()
    again = DurableJournal(str(tmp_path / "raft.log"))            # durable: what a restart reads
    assert [e[1] for e in again] == list(range(52, 71))
    assert not again.align_to_snapshot(entry(52), entry(53))      # already aligned: untouched
    again._destroy()


def test_another_history_or_a_journal_without_the_snapshot_is_left_to_pysyncobj(tmp_path):
    j = journal_with(tmp_path / "raft.log", [entry(i) for i in range(1, 31)])
    assert not j.align_to_snapshot(entry(52), entry(53))           # the dump is past the journal
    assert not j.align_to_snapshot(entry(10, term=2), entry(11, term=2))   # same index, other term
    assert [e[1] for e in j] == list(range(1, 31))
    j._destroy()


# -- through pysyncobj: one voter, restarted three times -------------------------------------------

def start(data_dir, port, min_records: int = 10 ** 9) -> RaftQuorum:
    q = RaftQuorum(0, {0: f"127.0.0.1:{port}"}, str(data_dir), "test-password",
                   compaction_min_entries=10 ** 6, compaction_min_time_s=10 ** 6,
                   compaction_min_records=min_records)
    deadline = time.monotonic() + 30
    while not q.is_leader:
        assert time.monotonic() < deadline, "a single voter did not lead"
        time.sleep(0.02)
    return q


def restarted_with(data_dir, port, names, what: str, **kw) -> RaftQuorum:
    """Start the node again on `data_dir` and wait until every one of `names` is applied
    (`what`: the failure's words); the caller destroys the running node."""
    q = start(data_dir, port, **kw)
    try:
        wait(lambda: applied(q) == set(names),
             lambda: f"{len(set(names) - applied(q))} of {len(names)} {what}")
    except BaseException:
        q.destroy()
        raise
    return q


def propose(q: RaftQuorum, names) -> None:
    left = set(names)
    for name in names:
        batch = r.encode_entries([r.ConfigRecord(resource_type=CONFIG[0], resource_name=CONFIG[1],
                                                 name=name, value="v")])[0]
        q.propose(batch, lambda result, error, name=name: error == 0 and left.discard(name))
    wait(lambda: not left, "entries committed")


def wait(cond, what, timeout_s: float = 30) -> None:
    """`what`: a description, or a callable giving one (evaluated on failure)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out: {what() if callable(what) else what}"
        time.sleep(0.02)


def applied(q: RaftQuorum) -> set[str]:
    return set(q.log.image.configs.get(CONFIG, {}))


def test_entries_after_the_snapshot_survive_a_restart_before_the_compaction_step(tmp_path):
    data, port = tmp_path / "c0", free_base_port()
    log_path = data / "raft.log"
    names = [f"e{i:03d}" for i in range(60)]
    q = start(data, port)
    try:
        propose(q, names[:30])
        shutil.copy(log_path, tmp_path / "before-compaction")     # the journal, uncompacted
        q.obj.forceLogCompaction()
        wait(lambda: (data / "raft.dump").exists() and len(q.journal) < 10, "a compaction")
        propose(q, names[30:])
    finally:
        q.destroy()
    # the state a stop right after the dump's rename leaves: the journal still holds what the
    # dump covers, then everything after it
    current = DurableJournal(str(log_path))
    old = DurableJournal(str(tmp_path / "before-compaction"))
    first = current[0][1]
    merged = [e for e in old if e[1] < first] + list(current)
    assert [e[1] for e in merged] == list(range(merged[0][1], merged[-1][1] + 1))
    current._rewrite(merged)
    current._destroy()
    old._destroy()
    os.remove(tmp_path / "before-compaction")

    # without the alignment pysyncobj cleared the journal to the dump: names[30:] were gone
    restarted_with(data, port, names, "committed entries lost").destroy()


def test_a_restart_applies_its_journal_a_bounded_slice_per_tick(tmp_path, monkeypatch):
    """pysyncobj applies every committed entry in one tick, during which a node neither
    heartbeats nor answers votes; a restart at 30,000 partitions replayed seconds of entries so
    and the quorum changed leader again and again. DurableSyncObj applies for at most
    APPLY_BUDGET_S a tick (0 here: one entry a tick), and everything is still applied."""
    from metadata_quorum.quorum import raft
    data, port = tmp_path / "c0", free_base_port()
    names = [f"e{i:03d}" for i in range(120)]
    q = start(data, port)
    try:
        propose(q, names)
    finally:
        q.destroy()
    per_call: list[int] = []
    bounded = raft.DurableSyncObj._SyncObj__applyLogEntries

    def recording(self):
        before = self._SyncObj__raftLastApplied
        try:
            return bounded(self)
        finally:
            per_call.append(self._SyncObj__raftLastApplied - before)
    monkeypatch.setattr(raft.DurableSyncObj, "_SyncObj__applyLogEntries", recording)
    monkeypatch.setattr(raft, "APPLY_BUDGET_S", 0.0)
    restarted_with(data, port, names, "entries not applied").destroy()
    assert sum(per_call) >= len(names)
    assert max(per_call) == 1, sorted(per_call)[-5:]


def test_the_log_compacts_by_records_too(tmp_path):
    """An entry holds up to hundreds of records: with many partitions pysyncobj's entry count
    is never reached, and a restart within its time limit replayed everything since the last
    snapshot. Past `compaction_min_records` records a compaction starts (entry count and time
    limits out of reach here), and a restart loads it and the rest."""
    data, port = tmp_path / "c0", free_base_port()
    q = start(data, port, min_records=100)
    names = [f"r{i:03d}" for i in range(150)]
    try:
        for i in range(0, 150, 10):             # 15 entries of 10 records each
            batch = r.encode_entries([r.ConfigRecord(resource_type=CONFIG[0],
                                                     resource_name=CONFIG[1], name=n, value="v")
                                      for n in names[i:i + 10]])[0]
            q.propose(batch, lambda result, error: None)
        wait(lambda: applied(q) == set(names), "records applied")
        wait(lambda: (data / "raft.dump").exists() and len(q.journal) < 15,
             lambda: f"no compaction: {len(q.journal)} entries in the journal")
    finally:
        q.destroy()
    q = restarted_with(data, port, names, "records missing after the restart", min_records=100)
    try:
        assert q.log.snapshot_offset_local >= 100
    finally:
        q.destroy()
