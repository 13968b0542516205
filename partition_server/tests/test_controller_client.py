"""The broker's metadata follower: replay is ordered, gap-checked, and never goes backwards."""

from metadata_quorum.records import TopicRecord, encode_record
from partition_server.controller_client import ControllerClient
from wire.records.batch import Record, build_batch


def batch(first_offset, names):
    import uuid
    return build_batch([Record(offset_delta=i, value=encode_record(TopicRecord(n, uuid.uuid4())))
                        for i, n in enumerate(names)], base_offset=first_offset)


def test_replay_moves_forward_only():
    c = ControllerClient(0, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9092, None)
    assert c._replay(batch(0, ["a", "b", "c"])) is not None
    assert c.image.offset == 2 and set(c.image.topics) == {"a", "b", "c"}
    # an older voter answers with records we already have: nothing changes
    assert c._replay(batch(0, ["x", "y"])) is None
    assert c.image.offset == 2 and "x" not in c.image.topics
    # overlapping: only the new tail applies
    c._replay(batch(2, ["c", "d"]))
    assert c.image.offset == 3 and "d" in c.image.topics
    # a gap is refused, the image stays where it was
    assert c._replay(batch(10, ["z"])) is None
    assert c.image.offset == 3 and "z" not in c.image.topics
