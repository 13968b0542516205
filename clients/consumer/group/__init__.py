"""One consumer's membership in a consumer group, for `Consumer.poll`.

    coordinator.py        CoordinatorClient, what both protocols share: finding the group
                          coordinator, OffsetCommit / OffsetFetch, CommitFailedError
    classic_member.py     GroupMember: JoinGroup / SyncGroup / Heartbeat / LeaveGroup (Kafka's
                          AbstractCoordinator)
    classic_rebalance.py  the classic revoke-join-assign loop (eager and cooperative, KIP-429)
    kip848_state.py       a KIP-848 member (group.protocol=consumer) as a pure state machine
    kip848_member.py      its I/O: ConsumerGroupHeartbeat task, reconciliation, epoch commits
    listeners.py          calling the application's rebalance listeners (sync or async)
"""
