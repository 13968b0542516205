"""The campaign's "ISR whole after the heal" failure message (chaos_tests/live/isr_report.py):
it names the round topic's partitions with leader, replicas, ISR and the missing replicas, and
groups every partition short of a replica by leader and missing broker, from a controller image
as well as from broker metadata. Round 41 of the kill campaign (issue 20) printed nothing."""

import uuid

from chaos_tests.live.isr_report import PartitionView, image_views, isr_report, summarize
from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage

ROUND = "camp-41-826914317"


def _round41_like() -> MetadataImage:
    """Broker 2 back and usable but out of every ISR that broker 0 leads."""
    recs = [r.RegisterBrokerRecord(b, f"i{b}", 100 + b, "h", 9000 + b, None, False)
            for b in range(3)]
    for n, name in enumerate([ROUND, "camp-40-1", "__consumer_offsets"]):
        tid = uuid.UUID(int=n + 1)
        recs.append(r.TopicRecord(name, tid))
        for p in range(3):
            replicas = tuple((p + i) % 3 for i in range(3))
            leader = replicas[0]
            isr = tuple(b for b in replicas if not (leader == 0 and b == 2))
            recs.append(r.PartitionRecord(tid, p, replicas, isr, leader, 2, 5))
    return MetadataImage.from_records(recs, len(recs))


def test_the_message_names_the_round_partitions_and_groups_the_cluster():
    views, brokers = image_views(_round41_like())
    text = summarize(views, ROUND, brokers)
    lines = text.split("\n")
    assert lines[0].strip() == f"{ROUND}-0: leader 0 replicas [0, 1, 2] isr [0, 1] missing [2]"
    assert lines[1].strip() == f"{ROUND}-1: leader 1 replicas [1, 2, 0] isr [1, 2, 0]"
    assert lines[3].strip() == "cluster-wide: 3 of 9 partitions leaderless or short of a replica"
    assert lines[4].strip() == ("leader 0, missing [2]: 3 (__consumer_offsets-0, camp-40-1-0, "
                                f"{ROUND}-0)")
    assert lines[5].strip() == "brokers: 0 usable (epoch 100), 1 usable (epoch 101), " \
                               "2 usable (epoch 102)"


def test_many_partitions_are_counted_not_all_named():
    views = [PartitionView("t", p, -1, (0, 1, 2), ()) for p in range(20)]
    text = summarize(views, "other")
    assert "other: not in the metadata" in text
    assert "leader -1, missing [0, 1, 2]: 20 (t-0, t-1, t-2, t-3, t-4, t-5, +14 more)" in text


def test_a_missing_controller_image_or_broker_is_said_not_raised():
    # nothing listens on this address: the broker view fails; the controller's is a reason
    text = isr_report("127.0.0.1:1", ROUND, "controller 3000: ConnectionClosed: refused",
                      timeout_s=1)
    assert "broker view unavailable" in text
    assert "controller view unavailable: controller 3000: ConnectionClosed: refused" in text
