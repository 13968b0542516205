"""Regression test for a finding from reading `PartitionState.isr_change_needed` against Kafka
(fixed: followers must also reach the leader's epoch start offset). A replica could join the ISR once its log end offset reaches the leader's high
watermark. Right after a leader change the new leader's high watermark lags (it is what the old
leader last told it) and every follower counts as caught up (their positions are reset to
"now"), so a replica that was out of the ISR and holds less than the new leader's log can be
proposed into the ISR while it lacks records the old leader had committed — and acknowledged.
Kafka's `Partition.isFollowerInSync` also requires the follower to have reached the leader's
epoch start offset (`leaderEpochStartOffsetOpt`: its log end offset when it became leader, which
covers everything committed before).

Sequence: old leader O (epoch 1) with ISR {O, N}; replica F out of the ISR. O commits and
acknowledges offsets 0..99 (N has them; F has 0..96). N's high watermark is still 95 (one fetch
behind). Leadership moves to N (epoch 2; e.g. preferred-leader rebalance, O stays in the ISR and
has not fetched yet, so the HW stays 95). F fetches first, at 97 ≥ 95: proposed into the ISR
without 97..99. If N and O then fail, F is an eligible leader and the acknowledged 97..99 are
gone.
"""

from partition_server.replication.partition import PartitionState


class FakeLog:
    def __init__(self, leo):
        self.log_end_offset = leo
        self.log_start_offset = 0


def test_replica_below_the_new_leaders_epoch_start_does_not_join_the_isr():
    n = PartitionState("t", 0, broker_id=1, log=FakeLog(100))
    n.become_follower(leader_id=0, leader_epoch=1, partition_epoch=3, replicas=[0, 1, 2],
                      isr=[0, 1])
    n.update_follower_high_watermark(95)             # what O said in its last fetch answer
    n.become_leader(leader_epoch=2, partition_epoch=4, replicas=[0, 1, 2], isr=[0, 1],
                    now_ms=1000)
    assert n.high_watermark == 95                   # O (in the ISR) has not fetched yet
    n.update_follower_fetch(2, 97, now_ms=1010)      # F: out of the ISR, holds 0..96
    change = n.isr_change_needed(now_ms=1020, replica_lag_time_max_ms=10_000)
    assert change is None or 2 not in change.new_isr, \
        f"replica 2 (log end 97) proposed into the ISR {change.new_isr} below the leader's " \
        f"epoch start offset 100"
