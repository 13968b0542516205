"""The simulated controller: the real `QuorumController` state machine behind one node.

The Raft quorum is not simulated (F8/F9 are the quorum's own tests); records a command returns
are committed at once by replaying them, which is what the real service does after Raft commits.
Brokers register, heartbeat and send AlterPartition as messages; every commit pushes the new
image to every broker (a push may be lost: heartbeat answers carry the image too).
"""

from __future__ import annotations

from metadata_quorum.controller.quorum_controller import QuorumController
from wire.errors import ErrorCode

TICK_MS = 250
REBALANCE_EVERY_TICKS = 20        # as metadata_quorum/service.py: preferred leaders every 5 s


class SimController:
    name = "controller"

    def __init__(self, sim, session_timeout_ms: int):
        self.sim = sim
        self.qc = QuorumController(session_timeout_ms=session_timeout_ms)
        self.qc.become_active(0)
        self.epochs: dict = {}          # (topic, partition) → last (leader_epoch, partition_epoch)

    def accepts(self) -> bool:
        return True

    @property
    def image(self):
        return self.qc.image

    def commit(self, records) -> None:
        if not records:
            return
        for rec in records:
            self.qc.replay(self.qc.image.offset + 1, rec)
        self.sim.invariants.on_controller_image(self.qc.image)
        for b in self.sim.brokers:
            self.sim.net.send(self.name, b.name, ("image", self.qc.image))

    def start(self) -> None:
        self.ticks = 0
        self.sim.sched.after(TICK_MS, self.tick)

    def tick(self) -> None:
        """The service's tick: fence lapsed brokers, unclean recoveries, and every 5 s move
        leadership back to preferred replicas (a leader change with no failure)."""
        self.ticks += 1
        before, decision = self.qc.image, self.qc.balancer_decision
        self.commit(self.qc.tick(self.sim.sched.now, self.ticks % REBALANCE_EVERY_TICKS == 0))
        if self.qc.balancer_decision is not decision and self.qc.balancer_decision.moves:
            self.sim.on_balancer_moves(before, self.qc.balancer_decision)
        self.sim.sched.after(TICK_MS, self.tick)

    def receive(self, src, msg) -> None:
        kind = msg[0]
        now = self.sim.sched.now
        if kind == "register":
            _, broker_id, incarnation, req_id, previous_epoch = msg
            records, res = self.qc.register_broker(broker_id, incarnation, "sim", 9092 + broker_id,
                                                   None, now, previous_broker_epoch=previous_epoch)
            self.commit(records)
            self.sim.net.send(self.name, src, ("registered", req_id, res.error, res.broker_epoch,
                                               self.qc.image))
        elif kind == "heartbeat":
            _, broker_id, broker_epoch, offset, req_id, log_infos = msg
            records, res = self.qc.broker_heartbeat(broker_id, broker_epoch, offset, False, False,
                                                    now)
            if res.error == ErrorCode.NONE and log_infos:   # as controller_handlers does
                self.qc.log_infos.record(broker_id, broker_epoch, log_infos)
            self.commit(records)
            self.sim.net.send(self.name, src, ("heartbeat_ok", req_id, res.error, res.is_fenced,
                                               self.qc.image))
        elif kind == "alter_partition":
            # as controller_handlers.handle_alter_partition: every change judged against the
            # same image, their records committed together
            _, broker_id, broker_epoch, changes, req_id = msg
            records, results = [], []
            for change, topic_id in changes:
                recs, res = self.qc.alter_partition(broker_id, broker_epoch, topic_id,
                                                    change.partition, change.leader_epoch,
                                                    change.partition_epoch, list(change.new_isr))
                records += recs
                results.append(res)
            self.commit(records)
            self.sim.net.send(self.name, src, ("alter_partition_ok", req_id, results))

    def set_cluster_config(self, key: str, value: str) -> None:
        """A dynamic cluster-wide broker config, as `raftka configs --entity-default` sets it."""
        records, results = self.qc.incremental_alter_configs([(4, "", [(key, 0, value)])])
        assert results[0][0] == ErrorCode.NONE, results[0]
        self.commit(records)

    def create_topic(self, name: str, partitions: int, rf: int, configs: dict) -> None:
        records, results = self.qc.create_topics([{"name": name, "num_partitions": partitions,
                                                   "replication_factor": rf, "configs": configs}])
        assert results[0].error == ErrorCode.NONE, results[0]
        self.commit(records)
