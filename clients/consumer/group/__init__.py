"""One consumer's membership in a consumer group, for `Consumer.poll`.

    classic_member.py     CoordinatorClient (find the coordinator, OffsetCommit/OffsetFetch,
                          shared by both protocols) and GroupMember: JoinGroup / SyncGroup /
                          Heartbeat / LeaveGroup (Kafka's AbstractCoordinator)
    classic_rebalance.py  the classic revoke-join-assign loop (eager and cooperative, KIP-429)
    kip848_state.py       a KIP-848 member (group.protocol=consumer) as a pure state machine
    kip848_member.py      its I/O: ConsumerGroupHeartbeat task, reconciliation, epoch commits
"""
