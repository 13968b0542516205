"""Invariants checked after every simulation event; the first violation stops the run.

- one leader per epoch: no two brokers ever act as leader of a partition in the same epoch;
- epochs monotonic: the controller's leader and partition epochs, and each broker's leader epoch
  (per process incarnation), never go down;
- high watermarks monotonic on every replica (per incarnation: a restart starts from the
  checkpoint), and committed data never changes: every replica's log below its high watermark
  equals the committed prefix ("truth", grown from leaders' high watermarks);
- HW ≤ min LEO of the ISR: the current leader's high watermark is at most the log end offset
  of every member of the controller's ISR;
- a broker's (leader epoch, partition epoch) of a partition never goes back: an older ISR must
  never replace a newer one (e.g. a late AlterPartition answer after a newer metadata image);
- every acknowledged acks=all record is committed at its offset, and present on every member of
  the controller's ISR (replicas that lost unflushed data in a power loss are exempt until the
  controller has taken them out of the ISR and let them back in after catching up: until then
  they are exactly what the ISR must not count, and a leader may still count them).
"""

from __future__ import annotations

from partition_server.replication.partition import Role


class Violation(AssertionError):
    pass


class Invariants:
    check_partition_epochs = True       # off only to look past a known finding

    def __init__(self, sim):
        self.sim = sim
        self.truth: dict = {}              # (topic, partition) → committed values by offset
        self.leaders: dict = {}            # (topic, partition, epoch) → broker id
        self.controller_epochs: dict = {}  # (topic, partition) → (leader_epoch, partition_epoch)
        self.replica_seen: dict = {}       # (broker, incarnation, tp) → (leader_epoch, hw)
        self.suspect: dict = {}            # (broker id, tp) → left the ISR since? (power loss)
        self.acked: dict = {}              # (topic, partition) → {offset: value}
        self.checks = 0

    def fail(self, message: str) -> None:
        raise Violation(f"t={self.sim.sched.now}ms event={self.sim.sched.events}: {message}")

    # -- hooks -----------------------------------------------------------------------------------

    def on_power_loss(self, broker) -> None:
        for tp in broker.disk.keys():
            self.suspect[(broker.broker_id, tp)] = False

    def suspect_brokers(self) -> set:
        """Brokers that lost unflushed data and have not been let back into every ISR since."""
        return {b for b, _ in self.suspect}

    def on_controller_image(self, image) -> None:
        for topic in image.topics.values():
            for p in topic.partitions.values():
                tp = (topic.name, p.partition_id)
                now = (p.leader_epoch, p.partition_epoch)
                before = self.controller_epochs.get(tp, (-1, -1))
                if now[0] < before[0] or now[1] < before[1]:
                    self.fail(f"{tp}: controller epochs went from {before} to {now}")
                self.controller_epochs[tp] = now
                if not set(p.isr) <= set(p.replicas) or (p.leader >= 0 and p.leader not in p.isr):
                    self.fail(f"{tp}: leader {p.leader} / ISR {p.isr} outside replicas "
                              f"{p.replicas}")
                for key, left in list(self.suspect.items()):
                    if key[1] != tp:
                        continue
                    if key[0] not in p.isr:
                        self.suspect[key] = True
                    elif left:
                        del self.suspect[key]     # re-admitted after catching up: judged again

    def on_replica_removed(self, broker, tp) -> None:
        """A reassignment moved `tp` off `broker`: if it comes back, it is a new replica (an
        empty log, a high watermark from 0), not the old one going backwards."""
        for key in ((broker.broker_id, broker.incarnation, tp),
                    (broker.broker_id, broker.incarnation, tp, "pe")):
            self.replica_seen.pop(key, None)

    def on_ack(self, topic, partition, offset, value) -> None:
        tp = (topic, partition)
        truth = self.truth.get(tp, [])
        if offset >= len(truth) or truth[offset] != value:
            self.fail(f"{tp}: {value!r} acknowledged at {offset} but the committed log has "
                      f"{truth[offset] if offset < len(truth) else 'nothing'} there")
        self.acked.setdefault(tp, {})[offset] = value

    # -- after every event -----------------------------------------------------------------------

    def check(self) -> None:
        self.checks += 1
        sim = self.sim
        brokers = [b for b in sim.brokers if b.up and b.replicas is not None]
        by_id = {b.broker_id: b for b in sim.brokers}
        image = sim.controller.image
        for b in brokers:
            for tp, hosted in b.replicas.partitions.items():
                state, plog = hosted.state, hosted.log
                hw = state.high_watermark
                key = (b.broker_id, b.incarnation, tp)
                epoch_before, hw_before = self.replica_seen.get(key, (-1, 0))
                if state.leader_epoch < epoch_before:
                    self.fail(f"{b.name} {tp}: leader epoch went from {epoch_before} to "
                              f"{state.leader_epoch}")
                if hw < hw_before:
                    self.fail(f"{b.name} {tp}: high watermark went from {hw_before} to {hw}")
                self.replica_seen[key] = (state.leader_epoch, hw)
                if hw > plog.log_end_offset:
                    self.fail(f"{b.name} {tp}: high watermark {hw} above log end "
                              f"{plog.log_end_offset}")
                self._committed(b, tp, plog.values, hw, state.role is Role.LEADER)
                pe_key = (b.broker_id, b.incarnation, tp, "pe")
                pe_before = self.replica_seen.get(pe_key, (-1, -1))
                pe_now = (state.leader_epoch, state.partition_epoch)
                if pe_now < pe_before and self.check_partition_epochs:
                    self.fail(f"{b.name} {tp}: (leader epoch, partition epoch) went from "
                              f"{pe_before} to {pe_now}: a stale ISR ({state.isr}) was applied")
                self.replica_seen[pe_key] = pe_now
                if state.role is Role.LEADER:
                    owner = self.leaders.setdefault((tp, state.leader_epoch), b.broker_id)
                    if owner != b.broker_id:
                        self.fail(f"{tp}: brokers {owner} and {b.broker_id} both led epoch "
                                  f"{state.leader_epoch}")
                    current = image.partition(*tp)
                    if current is None or current.leader_epoch != state.leader_epoch:
                        continue          # a deposed leader: the acked-record check covers it
                    for r in current.isr:
                        values = by_id[r].disk.values(tp)
                        if values is None or (r, tp) in self.suspect:
                            continue
                        if len(values) < hw:
                            self.fail(f"{b.name} {tp}: high watermark {hw} above the log end "
                                      f"{len(values)} of ISR member {r} (ISR {current.isr})")
        self._isr_holds_acked(by_id)

    def _committed(self, b, tp, values, hw, leader: bool) -> None:
        truth = self.truth.setdefault(tp, [])
        n = min(hw, len(truth))
        if values[:n] != truth[:n]:
            at = next(i for i in range(n) if values[i] != truth[i])
            self.fail(f"{b.name} {tp}: committed offset {at} holds {values[at]!r}, "
                      f"committed value is {truth[at]!r}")
        if hw > len(truth):
            if not leader and hw > len(truth):
                # a follower's HW comes from a leader's: the leader must have committed it first
                self.fail(f"{b.name} {tp}: follower high watermark {hw} ahead of every leader's "
                          f"({len(truth)})")
            truth.extend(values[len(truth):hw])

    def _isr_holds_acked(self, by_id) -> None:
        image = self.sim.controller.image
        for tp, acked in self.acked.items():
            if not acked:
                continue
            p = image.partition(*tp)
            if p is None:
                continue
            top = max(acked)
            truth = self.truth[tp]
            for r in p.isr:
                if (r, tp) in self.suspect:
                    continue
                values = by_id[r].disk.values(tp) or []
                if len(values) <= top or values[:top + 1] != truth[:top + 1]:
                    missing = next((o for o in sorted(acked) if o >= len(values)
                                    or values[o] != acked[o]), None)
                    if missing is not None:
                        self.fail(f"{tp}: ISR member {r} (ISR {p.isr}) lacks acknowledged "
                                  f"{acked[missing]!r} at {missing} (its log end "
                                  f"{len(values)})")
