"""The fsynced Raft journal and the Raft port's durability rules (issue 20 item 4), against an
fsync-tracking disk that drops whatever was not synced (metadata_quorum/testing_disk.py)."""

import json
import os
import struct
import threading
import time

import pytest

from metadata_quorum.quorum.durable_port import (DIRECTORY_KEY, NO_OP, READMIT_MARK,
                                                 DirectoryGuard, durable_transport)
from metadata_quorum.quorum.journal import (HEADER, DurableJournal, durable_replace,
                                            import_pysyncobj_journal)
from metadata_quorum.testing_disk import PowerLossDisk, SlowDisk


def open_journal(tmp_path, disk):
    return DurableJournal(str(tmp_path / "raft.log"), disk)


def entries(journal):
    return [(bytes(c), i, t) for c, i, t in journal]


def test_only_synced_entries_survive_a_power_loss(tmp_path):
    disk = PowerLossDisk()
    j = open_journal(tmp_path, disk)
    for i in range(1, 4):
        j.add(b"\x00a%d" % i, i, 1)
    j.sync()
    j.add(b"\x00lost", 4, 1)                   # written to the page cache only
    assert j.needs_sync
    disk.power_loss(str(tmp_path))
    again = open_journal(tmp_path, disk)
    assert entries(again) == [(b"\x00a%d" % i, i, 1) for i in range(1, 4)]


def test_group_commit_one_fsync_covers_many_entries(tmp_path):
    disk = PowerLossDisk()
    j = open_journal(tmp_path, disk)
    before = disk.fsyncs_of(j.path)
    for i in range(1, 201):
        j.add(b"\x00x" * 10, i, 3)
    j.sync()
    j.sync()                                   # nothing new: no second fsync
    assert disk.fsyncs_of(j.path) - before == 1
    disk.power_loss(str(tmp_path))
    assert len(open_journal(tmp_path, disk)) == 200


class FakeBase:
    """pysyncobj's transport as seen by the durable one: records sends and deliveries."""

    def __init__(self, log):
        self.log = log

    def send(self, node, message):
        self.log.append(("send", node, message))
        return True

    def _onMessageReceived(self, node, message):
        self.log.append(("deliver", node, message))


class Node:
    def __init__(self, address):
        self.address = address


def make_port(tmp_path, disk, raft_state=lambda: (False, 0, 0), propose=lambda p: None):
    j = open_journal(tmp_path, disk)
    guard = DirectoryGuard(j, raft_state, propose)
    log = []
    events = disk.events

    class Base(FakeBase):
        def send(self, node, message):
            events.append(("send", message["type"]))
            return super().send(node, message)

    port = durable_transport(Base, j, guard)(log)
    return j, guard, port, log


def settle(port, journal, deadline_s: float = 10.0) -> None:
    """flush_held until the journal's sync thread has synced every write made so far."""
    deadline = time.monotonic() + deadline_s
    port.flush_held()
    while journal.needs_sync:
        assert time.monotonic() < deadline, "the journal's sync thread did not finish"
        time.sleep(0.005)
        port.flush_held()


def test_an_ack_leaves_only_after_the_entries_it_covers_are_fsynced(tmp_path):
    disk = PowerLossDisk()
    j, _, port, log = make_port(tmp_path, disk)
    port.send("leader", {"type": "next_node_idx"})          # journal clean: sent at once
    j.add(b"\x00e1", 1, 1)
    j.add(b"\x00e2", 2, 1)
    port.send("leader", {"type": "next_node_idx", "success": True})
    port.send("leader", {"type": "apply_command"})          # held behind it, in order
    assert [e[0] for e in log] == ["send"]
    size_after_adds = os.path.getsize(j.path)
    mark = len(disk.events)
    port.flush_held()               # hands the sync to the sync thread: nothing durable yet
    assert [e[0] for e in log] == ["send"]
    settle(port, j)
    after = disk.events[mark:]
    assert after[0] == ("fsync", j.path, size_after_adds)    # one fsync, covering both entries
    assert after[1:] == [("send", "next_node_idx"), ("send", "apply_command")]


def test_a_held_message_waits_only_for_the_writes_made_before_it(tmp_path):
    """Group commit with a sync under way: an ack for entries written before the sync started
    leaves when it ends; one for entries written meanwhile waits for the next sync. The next
    sync ends only when the test says so: on a loaded machine this thread could otherwise sleep
    through both syncs and see the two acks leave together (seen in a full suite run)."""
    syncs, second_may_end = None, threading.Event()

    def fsync_time():
        if syncs is None:
            return 0                                        # opening the journal
        syncs.append(time.monotonic())
        if len(syncs) == 1:
            return 0.05
        assert second_may_end.wait(10)
        return 0
    disk = SlowDisk(fsync_time)
    j, _, port, log = make_port(tmp_path, disk)
    syncs = []
    j.add(b"\x00e1", 1, 1)
    port.send("leader", {"type": "next_node_idx", "next_node_idx": 2, "success": True})
    port.flush_held()                                       # sync 1 (covers e1) under way
    j.add(b"\x00e2", 2, 1)                                  # written while it runs
    port.send("leader", {"type": "next_node_idx", "next_node_idx": 3, "success": True})
    deadline = time.monotonic() + 10
    while not log:
        assert time.monotonic() < deadline
        time.sleep(0.005)
        port.flush_held()
    assert [m["next_node_idx"] for _, _, m in log] == [2]   # e2 is not on disk yet
    assert disk.fsyncs_of(j.path) >= 1
    second_may_end.set()
    settle(port, j)
    assert [m["next_node_idx"] for _, _, m in log] == [2, 3]


def test_acks_released_together_go_as_the_last_one_and_a_tick_s_appends_as_one(tmp_path):
    disk = PowerLossDisk()
    j, _, port, log = make_port(tmp_path, disk)
    for i in range(1, 4):
        j.add(b"\x00e%d" % i, i, 1)
        port.send("leader", {"type": "next_node_idx", "next_node_idx": i + 1, "success": True,
                             "reset": False})
    port.send("other", {"type": "next_node_idx", "next_node_idx": 9, "success": False,
                        "reset": True})                      # another kind: kept, in order
    settle(port, j)
    assert [(e[1], e[2]["next_node_idx"]) for e in log] == [("leader", 4), ("other", 9)]
    # AppendEntries of one tick, one per proposal as pysyncobj sends them: one message
    log.clear()
    for i in range(4, 7):
        port.send("f1", {"type": "append_entries", "term": 2, "commit_index": i - 2,
                         "entries": [(b"\x00e%d" % i, i, 2)], "prevLogIdx": i - 1,
                         "prevLogTerm": 1 if i == 4 else 2})
    port.send("f1", {"type": "append_entries", "term": 2, "commit_index": 5,
                     "entries": [(b"\x00x", 9, 2)], "prevLogIdx": 8, "prevLogTerm": 2})  # a gap
    assert log == []                                        # they leave at the end of the tick
    port.flush_held()
    sent = [e[2] for e in log]
    assert len(sent) == 2
    assert [e[1] for e in sent[0]["entries"]] == [4, 5, 6]
    assert (sent[0]["prevLogIdx"], sent[0]["prevLogTerm"], sent[0]["commit_index"]) == (3, 1, 4)
    assert sent[1]["prevLogIdx"] == 8


def test_a_stale_ack_does_not_move_the_leaders_next_index_back(tmp_path):
    """pysyncobj sets a follower's next index to every success it reads; the port keeps it from
    going back below entries already sent (which would be resent, and dropped and re-added)."""
    disk = PowerLossDisk()
    j, _, port, log = make_port(tmp_path, disk)
    peer = Node("127.0.0.1:9005")

    class SyncObjStandIn:
        _SyncObj__raftNextIndex = {peer: 20}                # entries up to 19 sent
    port._syncObj = SyncObjStandIn()
    next_index = SyncObjStandIn._SyncObj__raftNextIndex

    def deliver(self, node, message):                       # what pysyncobj's handler does
        log.append(("deliver", node, message))
        if message.get("success") or message.get("reset"):
            next_index[node] = message["next_node_idx"]
    FakeBase._onMessageReceived, saved = deliver, FakeBase._onMessageReceived
    try:
        port._onMessageReceived(peer, msg("next_node_idx", "d", next_node_idx=12, success=True,
                                          reset=False))
        assert next_index[peer] == 20                        # not back to 12
        port._onMessageReceived(peer, msg("next_node_idx", "d", next_node_idx=25, success=True,
                                          reset=False))
        assert next_index[peer] == 25
        port._onMessageReceived(peer, msg("next_node_idx", "d", next_node_idx=7, success=False,
                                          reset=True))
        assert next_index[peer] == 7                         # a conflict still moves it back
    finally:
        FakeBase._onMessageReceived = saved


def test_the_leaders_append_entries_leave_before_its_own_fsync(tmp_path):
    """Followers write while the leader writes: the AppendEntries leave at the end of the tick,
    while the leader's own sync is still under way (its acks and answers wait for it)."""
    disk = SlowDisk(0.2)
    j, _, port, log = make_port(tmp_path, disk)
    j.add(b"\x00e1", 1, 1)
    port.send("follower", {"type": "apply_command_response"})   # held: the journal is dirty
    port.send("follower", {"type": "append_entries", "term": 1, "commit_index": 0,
                           "entries": [(b"\x00e1", 1, 1)], "prevLogIdx": 0, "prevLogTerm": 0})
    port.flush_held()
    assert [e[2]["type"] for e in log] == ["append_entries"]
    assert j.needs_sync                                     # the leader's sync has not ended
    settle(port, j)
    assert [e[2]["type"] for e in log] == ["append_entries", "apply_command_response"]


def test_every_message_carries_this_directory_id(tmp_path):
    disk = PowerLossDisk()
    j, _, port, _ = make_port(tmp_path, disk)
    message = {"type": "request_vote"}
    port.send("peer", message)
    assert message[DIRECTORY_KEY] == j.directory_id


def test_term_and_vote_are_durable_when_set(tmp_path):
    disk = PowerLossDisk()
    j = open_journal(tmp_path, disk)
    j.setCurrentTerm(7, "127.0.0.1:9001")
    disk.power_loss(str(tmp_path))
    again = open_journal(tmp_path, disk)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (7, "127.0.0.1:9001")
    assert again.directory_id == j.directory_id


def test_commit_index_is_stored_after_its_entries_and_clamped_on_load(tmp_path):
    disk = PowerLossDisk()
    j = open_journal(tmp_path, disk)
    for i in range(1, 6):
        j.add(b"\x00c", i, 1)
    j.setRaftCommitIndex(5)
    j.onOneSecondTimer()                       # nothing synced: nothing covered is stored
    assert json.loads((tmp_path / "raft.log.meta").read_bytes())["commit_index"] <= 0
    j.start_sync()                             # on the sync thread; stored once it ended
    deadline = time.monotonic() + 10
    while not j.collect_synced():
        assert time.monotonic() < deadline
        time.sleep(0.005)
    j.onOneSecondTimer()
    disk.power_loss(str(tmp_path))
    again = open_journal(tmp_path, disk)
    assert again.getRaftCommitIndex() == 5 and len(again) == 5
    again.deleteEntriesFrom(2)                 # overwritten from index 3 by a new leader:
    again.add(b"\x00other", 3, 2)              # a file shorter than the stored commit index
    again.sync()
    assert open_journal(tmp_path, disk).getRaftCommitIndex() == 3


def test_a_resend_never_takes_acknowledged_entries_off_the_disk(tmp_path):
    """pysyncobj drops a follower's entries after prevLogIdx whenever a leader resends (its
    pipelined acks move the next index back); Raft truncates only at a conflict."""
    disk = PowerLossDisk()
    j = open_journal(tmp_path, disk)
    for i in range(1, 11):
        j.add(b"\x00r%d" % i, i, 1)
    j.sync()                                   # 1-10 acknowledged
    j.deleteEntriesFrom(5)                     # a resend from index 6...
    assert len(j) == 5 and j[-1][1] == 5
    for i in range(6, 9):                      # ...carrying 6-8 again
        j.add(b"\x00r%d" % i, i, 1)
    assert not j.needs_sync and len(j) == 8
    disk.power_loss(str(tmp_path))             # 9 and 10 are still on disk
    assert [i for _, i, _ in open_journal(tmp_path, disk)] == list(range(1, 11))


def test_a_torn_tail_is_cut_at_load(tmp_path):
    disk = PowerLossDisk()
    j = open_journal(tmp_path, disk)
    j.add(b"\x00whole", 1, 1)
    j.add(b"\x00torn-entry", 2, 1)
    j.sync()
    size = os.path.getsize(j.path)
    with open(j.path, "r+b") as f:            # the second record's last bytes never made it
        f.truncate(size - 3)
    with open(j.path, "ab") as f:             # and a garbage length after a crc mismatch
        f.write(struct.pack("<II", 10, 0))
    again = open_journal(tmp_path, disk)
    assert entries(again) == [(b"\x00whole", 1, 1)]
    again.add(b"\x00next", 2, 2)
    again.sync()
    assert entries(open_journal(tmp_path, disk)) == [(b"\x00whole", 1, 1), (b"\x00next", 2, 2)]


def test_truncation_and_compaction_are_durable(tmp_path):
    disk = PowerLossDisk()
    j = open_journal(tmp_path, disk)
    for i in range(1, 11):
        j.add(b"\x00t%d" % i, i, 1)
    j.sync()
    j.deleteEntriesFrom(8)                     # a new leader overwrote entries 9 and 10
    j.add(b"\x00new9", 9, 2)
    j.sync()
    j.deleteEntriesTo(3)                       # compaction: entries 1-3 are in the snapshot
    disk.power_loss(str(tmp_path))
    again = open_journal(tmp_path, disk)
    assert [i for _, i, _ in again] == [4, 5, 6, 7, 8, 9]
    assert again[-1] == (b"\x00new9", 9, 2)


def test_snapshot_rename_is_durable_and_a_bare_rename_is_not(tmp_path):
    """pysyncobj's snapshot writer renames its temporary file over raft.dump; install() routes
    that through durable_replace. The shim shows why: a bare rename is lost with the cache."""
    disk = PowerLossDisk()
    dump = tmp_path / "raft.dump"
    for name, data in (("raft.dump.tmp", b"old snapshot"),):
        (tmp_path / name).write_bytes(data)
    durable_replace(str(tmp_path / "raft.dump.tmp"), str(dump), disk)
    (tmp_path / "raft.dump.tmp").write_bytes(b"new snapshot")
    os.rename(tmp_path / "raft.dump.tmp", dump)             # pysyncobj's own atomicReplace
    disk.power_loss(str(tmp_path))
    assert dump.read_bytes() == b"old snapshot"
    (tmp_path / "raft.dump.tmp").write_bytes(b"new snapshot")
    durable_replace(str(tmp_path / "raft.dump.tmp"), str(dump), disk)
    disk.power_loss(str(tmp_path))
    assert dump.read_bytes() == b"new snapshot"


def test_a_wiped_directory_gets_a_new_directory_id(tmp_path):
    disk = PowerLossDisk()
    first = open_journal(tmp_path, disk).directory_id
    assert open_journal(tmp_path, disk).directory_id == first
    for name in os.listdir(tmp_path):
        os.unlink(tmp_path / name)
    assert open_journal(tmp_path, disk).directory_id != first


def msg(kind, directory, **fields):
    return {"type": kind, DIRECTORY_KEY: directory, **fields}


def test_a_peer_with_a_new_directory_neither_votes_nor_counts_until_readmitted(tmp_path):
    disk = PowerLossDisk()
    state = {"leader": True, "term": 5, "commit": 40}
    proposals = []
    j, guard, port, log = make_port(
        tmp_path, disk, lambda: (state["leader"], state["term"], state["commit"]),
        proposals.append)
    peer = Node("127.0.0.1:9002")
    port._onMessageReceived(peer, msg("response_vote", "old-id", term=5))   # first seen: pinned
    assert log.pop()[0] == "deliver"
    assert open_journal(tmp_path, disk).peer_directories() == {peer.address: "old-id"}
    # the leader writes the id it pinned into the log, once per term
    assert proposals == [READMIT_MARK + b'["127.0.0.1:9002", "old-id"]']
    port._onMessageReceived(peer, msg("next_node_idx", "old-id", next_node_idx=2, success=True))
    assert log.pop()[2]["success"] is True and len(proposals) == 1
    proposals.clear()
    # the peer's disk is wiped: it comes back with another id
    port._onMessageReceived(peer, msg("response_vote", "new-id", term=5))
    assert log == []                                                       # a vote: dropped
    port._onMessageReceived(peer, msg("request_vote", "new-id", term=6, last_log_term=5,
                                      last_log_index=99))
    request = log.pop()[2]
    assert request["term"] == 6 and request["last_log_term"] == -1        # never granted
    port._onMessageReceived(peer, msg("next_node_idx", "new-id", next_node_idx=20,
                                      success=True, reset=False))
    ack = log.pop()[2]
    assert ack["success"] is False and ack["reset"] is False and proposals == []   # behind
    port._onMessageReceived(peer, msg("next_node_idx", "new-id", next_node_idx=41,
                                      success=True, reset=False))
    assert log.pop()[2]["success"] is False                 # caught up: still not counted...
    assert len(proposals) == 1                              # ...but its re-admission is proposed
    port._onMessageReceived(peer, msg("next_node_idx", "new-id", next_node_idx=41,
                                      success=True, reset=False))
    assert len(proposals) == 1                              # once per term
    # the proposal comes back through the log as a no-op entry; pinned once committed
    command = NO_OP + proposals[0]
    assert proposals[0].startswith(READMIT_MARK)
    for i in range(1, 42):
        j.add(b"\x00x", i, 5)
    j.add(command, 42, 5)
    port.flush_held()
    assert guard.pins[peer.address] == "old-id"             # not committed yet
    state["commit"] = 42
    port.flush_held()
    assert guard.pins[peer.address] == "new-id"
    assert open_journal(tmp_path, disk).peer_directories()[peer.address] == "new-id"
    port._onMessageReceived(peer, msg("next_node_idx", "new-id", next_node_idx=43,
                                      success=True, reset=False))
    assert log.pop()[2]["success"] is True                  # an ordinary voter again


def test_a_readmission_that_was_overwritten_is_not_applied(tmp_path):
    disk = PowerLossDisk()
    state = {"commit": 0}
    j, guard, port, _ = make_port(tmp_path, disk, lambda: (False, 2, state["commit"]))
    guard.pin("127.0.0.1:9003", "old-id")
    j.add(b"\x00x", 1, 1)
    j.add(NO_OP + READMIT_MARK + b'["127.0.0.1:9003", "new-id"]', 2, 1)   # uncommitted
    j.deleteEntriesFrom(1)                     # a new leader overwrote it
    j.add(b"\x00y", 2, 2)
    state["commit"] = 2
    port.flush_held()
    assert guard.pins["127.0.0.1:9003"] == "old-id"


def test_a_journal_of_another_format_is_refused(tmp_path):
    (tmp_path / "raft.log").write_bytes(b"PYSYNCOBJ" + b"\0" * 40)
    (tmp_path / "raft.log.meta").write_bytes(b'{"directory_id": "x"}')
    with pytest.raises(ValueError, match="not a raftka Raft journal"):
        open_journal(tmp_path, PowerLossDisk())
    assert HEADER.startswith(b"RAFTKA")


def test_a_directory_from_before_imports_pysyncobjs_journal(tmp_path):
    from pysyncobj.journal import FileJournal
    old = FileJournal(str(tmp_path / "raft.journal"))
    for i in range(1, 6):
        old.add(b"\x00old%d" % i, i, 2)
    old.setCurrentTerm(3, "127.0.0.1:9001")
    old._destroy()
    disk = PowerLossDisk()
    j = open_journal(tmp_path, disk)
    assert import_pysyncobj_journal(str(tmp_path / "raft.journal"), j) == 5
    disk.power_loss(str(tmp_path))              # the import is durable
    again = open_journal(tmp_path, disk)
    assert entries(again) == [(b"\x00old%d" % i, i, 2) for i in range(1, 6)]
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (3, "127.0.0.1:9001")
    assert import_pysyncobj_journal(str(tmp_path / "raft.journal"), again) == 0


def test_a_follower_learns_a_peers_id_from_the_log_not_only_first_hand(tmp_path):
    """Followers never talk to each other: a follower that first hears a peer when that peer
    campaigns after a wipe must already know the old id, from the leader's committed entry."""
    disk = PowerLossDisk()
    state = {"commit": 0}
    j, guard, port, log = make_port(tmp_path, disk, lambda: (False, 4, state["commit"]))
    j.add(b"\x00x", 1, 4)
    j.add(NO_OP + READMIT_MARK + b'["127.0.0.1:9004", "old-id"]', 2, 4)
    state["commit"] = 2
    port.flush_held()
    assert guard.pins == {"127.0.0.1:9004": "old-id"}
    port._onMessageReceived(Node("127.0.0.1:9004"), msg("response_vote", "new-id", term=5))
    assert log == []                                   # the wiped peer's vote does not count
