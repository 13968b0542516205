"""Deterministic, seeded simulation of replication: the real replication state machines
(`PartitionState`, `ReplicaManager`, the follower fetcher, the controller's election and
AlterPartition logic) on a virtual clock and a faulty in-memory network. See `simulation.py`."""
