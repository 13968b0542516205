"""pysyncobj's snapshot written by a thread (quorum/snapshot_writer.py), never a forked child."""

import os
import time

from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.serializer import Serializer

from metadata_quorum.image import MetadataImage
from metadata_quorum.quorum.snapshot_writer import ThreadSerializer


def _finish(writer, deadline_s=30):
    deadline = time.monotonic() + deadline_s
    states = []
    while time.monotonic() < deadline:
        state, ident = writer.checkSerializing()
        states.append(state)
        if state in (SERIALIZER_STATE.SUCCESS, SERIALIZER_STATE.FAILED):
            return states, ident
        time.sleep(0.001)
    raise AssertionError(f"the snapshot was not written in {deadline_s} s: {states[-3:]}")


def test_the_snapshot_is_the_state_at_the_call_and_no_process_is_forked(tmp_path, monkeypatch):
    def no_fork():
        raise AssertionError("a snapshot must not fork this multi-threaded process")
    monkeypatch.setattr(os, "fork", no_fork)
    dump = str(tmp_path / "raft.dump")
    writer = ThreadSerializer(dump, 2 ** 16, True, None, None, None)
    tail = [b"record-%d" % i for i in range(200_000)]
    consumer = {"next_offset": 200_000, "image": MetadataImage(), "tail": tail,
                "tail_start": 0, "writer": b"w"}
    writer.serialize(([{"_SyncObj__enabledCodeVersion": 0}, consumer], ("e1", 2), ("e0", 1),
                      {"node"}), 1)
    tail.append(b"applied after the snapshot began")     # pysyncobj's thread carries on
    del tail[:10]
    states, ident = _finish(writer)
    assert states[-1] == SERIALIZER_STATE.SUCCESS and ident == 1
    assert writer.checkSerializing()[0] == SERIALIZER_STATE.NOT_SERIALIZING
    # pysyncobj's own reader takes it (same format as its forked writer's)
    state, e1, e0, cluster = Serializer(dump, 2 ** 16, False, None, None, None).deserialize()
    written = state[1]
    assert written["tail"] == [b"record-%d" % i for i in range(200_000)]
    assert written["next_offset"] == 200_000 and isinstance(written["image"], MetadataImage)
    assert (e1, e0, cluster) == (("e1", 2), ("e0", 1), {"node"})
    assert not os.path.exists(dump + ".tmp")


def test_a_snapshot_that_cannot_be_written_fails_and_the_next_one_is_taken(tmp_path):
    dump = tmp_path / "gone" / "raft.dump"                # its directory does not exist
    writer = ThreadSerializer(str(dump), 2 ** 16, True, None, None, None)
    writer.serialize(([{}], None, None, set()), 7)
    states, ident = _finish(writer)
    assert states[-1] == SERIALIZER_STATE.FAILED and ident == 7
    dump.parent.mkdir()
    writer.serialize(([{"x": 1}], None, None, set()), 8)
    states, ident = _finish(writer)
    assert states[-1] == SERIALIZER_STATE.SUCCESS and ident == 8 and dump.exists()


def test_while_it_writes_the_old_dump_is_not_offered_to_followers(tmp_path):
    """As while pysyncobj's child ran: no transmission of a snapshot about to be replaced."""
    dump = str(tmp_path / "raft.dump")
    writer = ThreadSerializer(dump, 2 ** 16, True, None, None, None)
    writer.serialize(([{"x": list(range(2_000_000))}], None, None, set()), 1)
    assert writer.getTransmissionData("follower") is None
    _finish(writer)
    assert writer.getTransmissionData("follower") is not None


def test_a_snapshot_installed_from_the_leader_meanwhile_is_not_overwritten(tmp_path, monkeypatch):
    """A follower writing its own snapshot receives the leader's (newer): the leader's stays,
    and ours is reported failed, so pysyncobj does not take our older index for the dump's."""
    import gzip
    import io
    import threading

    import pysyncobj.pickle as real_pickle

    from metadata_quorum.quorum import snapshot_writer
    go = threading.Event()

    class Held:                             # our writer waits until the install is done
        @staticmethod
        def dump(data, f):
            go.wait(10)
            real_pickle.dump(data, f)
    monkeypatch.setattr(snapshot_writer, "pysyncobj_pickle", Held)
    dump = str(tmp_path / "raft.dump")
    writer = ThreadSerializer(dump, 2 ** 16, True, None, None, None)
    writer.serialize(([{"ours": 1}], None, None, set()), 5)
    leaders = io.BytesIO()
    with gzip.GzipFile(fileobj=leaders, mode="wb") as g:
        real_pickle.dump(([{"leader's": 2}], None, None, set()), g)
    assert writer.setTransmissionData((leaders.getvalue(), True, True)) is True
    go.set()
    states, ident = _finish(writer)
    assert states[-1] == SERIALIZER_STATE.FAILED and ident == 5
    assert Serializer(dump, 2 ** 16, False, None, None, None).deserialize()[0] == [{"leader's": 2}]
