"""The controller's command pipeline (metadata_quorum/pipeline.py) and the entry fences the
metadata log checks (records.fence_entry, quorum/raft.MetadataLog.apply).

The seeded runs drive the real QuorumController through the real CommandPipeline into the real
MetadataLog, through a stand-in for pysyncobj that commits late, in bursts, and fails the way it
can: a lost leadership truncates part of what was appended and *forwards* what was still queued
to the next leader (pysyncobj does), an entry is refused at enqueue while later ones go through
(QUEUE_FULL), a commit times out and the controller renounces while its entries still commit.
Checked after every step: the committed image equals replaying the committed records; every
entry of ours that applied was computed on exactly the state it applied on (its premise); every
command answered as a success has its records in the committed log at its offsets; an idle
pipeline's speculative image is the committed one. A control run with the fences stripped shows
the premise check catches what the fences prevent.
"""

from __future__ import annotations

import random

import pytest

from metadata_quorum import records as r
from metadata_quorum.controller.quorum_controller import QuorumController
from metadata_quorum.image import MetadataImage
from metadata_quorum.pipeline import CommandPipeline, NotProposable
from metadata_quorum.quorum.raft import FENCED, MetadataLog, Reset

QUEUE_FULL, NOT_LEADER = 2, 4          # pysyncobj FAIL_REASON values (any nonzero fails)


def apply(mlog: MetadataLog, entry: bytes) -> int:
    return mlog.apply.__wrapped__(mlog, entry)


# -- the fences, one by one -------------------------------------------------------------------

def _entry(activation: bytes, expected: int, *recs) -> bytes:
    batch = r.msgpack.packb([r.encode_record(x) for x in recs], use_bin_type=True)
    return r.fence_entry(batch, activation, expected)


def test_an_activation_entry_makes_its_writer_current_and_always_applies():
    mlog = MetadataLog()
    assert apply(mlog, _entry(b"a", r.ACTIVATE, r.NoOpRecord())) == 0
    assert apply(mlog, _entry(b"a", 1, r.NoOpRecord())) == 1
    assert apply(mlog, _entry(b"b", r.ACTIVATE, r.NoOpRecord())) == 2
    assert mlog.writer == b"b" and mlog.next_offset == 3


def test_an_entry_of_an_earlier_writer_or_for_another_offset_is_skipped_everywhere():
    mlog = MetadataLog()
    apply(mlog, _entry(b"a", r.ACTIVATE, r.NoOpRecord()))
    topic = r.TopicRecord("t", __import__("uuid").uuid4())
    assert apply(mlog, _entry(b"a", 5, topic)) == FENCED            # offset 1 expected
    apply(mlog, _entry(b"b", r.ACTIVATE, r.NoOpRecord()))
    assert apply(mlog, _entry(b"a", 2, topic)) == FENCED            # right offset, old writer
    assert "t" not in mlog.image.topics and mlog.next_offset == 2 and mlog.fenced_local == 2
    assert apply(mlog, _entry(b"b", 2, topic)) == 2 and "t" in mlog.image.topics


def test_a_skipped_entry_is_not_decoded(monkeypatch):
    """A deposed controller's pipeline can leave hundreds of entries of hundreds of records,
    replayed by every node at each restart: the fence is checked before the records are
    decoded (a record that cannot decode shows it: FENCED, not an undecodable batch)."""
    mlog = MetadataLog()
    apply(mlog, _entry(b"a", r.ACTIVATE, r.NoOpRecord()))
    garbage = r.fence_entry(r.msgpack.packb([b"\xff not a record"], use_bin_type=True), b"a", 7)
    assert apply(mlog, garbage) == FENCED and mlog.bad_batches_local == 0
    # while the same bytes for the current offset are an undecodable batch, as before
    good_fence = r.fence_entry(r.msgpack.packb([b"\xff not a record"], use_bin_type=True),
                               b"a", 1)
    assert apply(mlog, good_fence) == -1 and mlog.bad_batches_local == 1
    assert mlog.next_offset == 1


def test_an_unfenced_entry_from_an_older_journal_still_applies():
    mlog = MetadataLog()
    assert apply(mlog, r.encode_entries([r.NoOpRecord(), r.NoOpRecord()])[0]) == 0
    assert mlog.next_offset == 2


def test_a_malformed_fence_is_an_undecodable_entry_not_a_crash():
    mlog = MetadataLog()
    bad = r.msgpack.packb([r.FENCE_TAG, "not-bytes", 0, b""], use_bin_type=True)
    assert apply(mlog, bad) == -1 and mlog.next_offset == 0


def test_a_writer_survives_a_raft_snapshot_of_the_log():
    mlog = MetadataLog()
    apply(mlog, _entry(b"a", r.ACTIVATE, r.NoOpRecord()))
    copy = MetadataLog()
    copy._deserialize(mlog._serialize())
    assert copy.writer == b"a" and apply(copy, _entry(b"a", 1, r.NoOpRecord())) == 1


# -- the pipeline, by hand --------------------------------------------------------------------

def _active_pipeline(mlog: MetadataLog) -> CommandPipeline:
    ids = iter(range(1000))
    pipe = CommandPipeline(new_activation=lambda: b"me-%d" % next(ids))
    mlog.subscribe(lambda ev: pipe.committed_upto(ev.image, ev.first + len(ev.encoded)))
    p = pipe.activate([r.NoOpRecord()])
    pipe.entry_done(p, None if apply(mlog, p.entries[0]) >= 0 else "fenced")
    assert pipe.active and p.done and p.error is None
    return pipe


def test_commands_see_what_is_in_flight_and_answers_wait_for_commit():
    mlog = MetadataLog()
    pipe = _active_pipeline(mlog)
    qc = QuorumController()
    reg = pipe.propose([r.RegisterBrokerRecord(0, "i", 1, "h", 1, fenced=False)])
    pipe.entry_done(reg, None if apply(mlog, reg.entries[0]) >= 0 else "fenced")
    qc.load_image(pipe.speculative)
    recs, res = qc.create_topics([{"name": "a", "assignments": {0: [0]}}])
    assert res[0].error == 0 and recs
    first = pipe.propose(recs)
    qc.load_image(pipe.speculative)
    _, again = qc.create_topics([{"name": "a", "assignments": {0: [0]}}])
    assert again[0].error == 36                 # TOPIC_ALREADY_EXISTS: it saw the one in flight
    assert "a" not in pipe.committed.topics and not first.done
    assert pipe.last_pending() is first
    pipe.entry_done(first, None if apply(mlog, first.entries[0]) >= 0 else "fenced")
    assert first.done and first.error is None and pipe.last_pending() is None
    assert pipe.speculative is pipe.committed and "a" in pipe.committed.topics


def test_a_failure_fails_everything_in_flight_and_needs_a_new_activation():
    mlog = MetadataLog()
    pipe = _active_pipeline(mlog)
    a = pipe.propose([r.NoOpRecord()])
    b = pipe.propose([r.NoOpRecord(), r.NoOpRecord()])
    assert pipe.speculative_next == 4
    assert pipe.entry_done(a, "lost the leadership") == [a, b]
    assert a.error == b.error == "lost the leadership" and not pipe.active
    assert pipe.speculative is pipe.committed and pipe.speculative_next == 1
    with pytest.raises(NotProposable):
        pipe.propose([r.NoOpRecord()])
    # b's entry may still reach the log (it was appended): its premise (a) never committed
    assert apply(mlog, b.entries[0]) == FENCED
    assert pipe.entry_done(b, None) == []       # a late success of a failed proposal: ignored


def test_which_failures_are_certain_and_which_in_doubt():
    """A client must hear "unknown" (REQUEST_TIMED_OUT) for a command that may still commit:
    a proposal refused before the log is certain, and so is every later one of its activation
    (fenced on its offset); one before it may still commit; a timeout is in doubt."""
    pipe = _active_pipeline(MetadataLog())
    a, b, c = (pipe.propose([r.NoOpRecord()]) for _ in range(3))
    pipe.entry_done(b, "queue full", in_doubt=False)
    assert (a.in_doubt, b.in_doubt, c.in_doubt) == (True, False, False)
    pipe = _active_pipeline(MetadataLog())
    a, b = pipe.propose([r.NoOpRecord()]), pipe.propose([r.NoOpRecord()])
    pipe.fail(a, "commit timed out", in_doubt=True)
    assert a.in_doubt and b.in_doubt and a.error == b.error == "commit timed out"
    pipe = _active_pipeline(MetadataLog())
    a = pipe.propose([r.NoOpRecord()])
    pipe.renounce("a Raft snapshot replaced the log")
    assert a.in_doubt
    committed = _active_pipeline(MetadataLog()).propose([r.NoOpRecord()])
    assert not committed.in_doubt                   # nothing failed


def test_after_a_lost_leadership_a_commit_raft_reports_is_a_success():
    mlog = MetadataLog()
    pipe = _active_pipeline(mlog)
    a = pipe.propose([r.NoOpRecord()])
    b = pipe.propose([r.NoOpRecord()])
    pipe.deactivate()
    with pytest.raises(NotProposable):
        pipe.propose([r.NoOpRecord()])
    assert apply(mlog, a.entries[0]) == 1           # a committed after all: a success
    pipe.entry_done(a, None)
    assert a.done and a.error is None
    # leadership back: b was never reported; the new activation entry committing settles it
    act = pipe.activate([r.NoOpRecord()])
    assert apply(mlog, act.entries[0]) == 2
    assert pipe.entry_done(act, None) == [act, b]
    assert b.error == "superseded by a new activation" and act.error is None and pipe.active
    assert pipe.speculative is pipe.committed and not pipe.inflight
    assert apply(mlog, b.entries[0]) == FENCED      # should it turn up after all


def test_an_old_activations_failure_does_not_touch_the_current_one():
    mlog = MetadataLog()
    pipe = _active_pipeline(mlog)
    old = pipe.propose([r.NoOpRecord()])
    pipe.deactivate()
    act = pipe.activate([r.NoOpRecord()])
    assert pipe.fail(old, "truncated") == [old]
    assert not act.done and act in pipe.inflight


def test_a_big_command_is_one_proposal_of_several_fenced_entries():
    mlog = MetadataLog()
    pipe = _active_pipeline(mlog)
    big = [r.ConfigRecord(2, "t", f"k{i}", "v" * 1000) for i in range(200)]
    p = pipe.propose(big)
    assert len(p.entries) > 2 and p.end_offset == 1 + len(big) + 2   # Begin and End
    for entry in p.entries:
        assert apply(mlog, entry) >= 0
        pipe.entry_done(p, None)
    assert p.done and p.error is None and mlog.next_offset == p.end_offset
    assert pipe.committed.same_state(pipe.speculative) and not pipe.committed.in_transaction


# -- seeded runs through a misbehaving Raft ---------------------------------------------------

class FlakyRaft:
    """pysyncobj as the controller sees it: `queued` (its command queue), `appended` (in the
    leader's log, not committed), commits in order; see the module doc for the faults."""

    def __init__(self, mlog: MetadataLog, rng: random.Random, fences: bool = True):
        self.mlog, self.rng, self.fences = mlog, rng, fences
        self.queued: list = []
        self.appended: list = []
        self.leader = True

    def propose(self, entry: bytes, callback) -> None:
        self.queued.append((entry, callback))

    def _apply(self, entry: bytes) -> int:
        if not self.fences:                     # the control: what an unfenced log would do
            fence, items = r.unfence_entry(entry)
            entry = r.msgpack.packb(items, use_bin_type=True)
        return apply(self.mlog, entry)

    def append_some(self) -> None:
        n = self.rng.randint(0, len(self.queued))
        self.appended += self.queued[:n]
        del self.queued[:n]

    def commit_some(self) -> None:
        n = self.rng.randint(0, len(self.appended))
        done, self.appended = self.appended[:n], self.appended[n:]
        for entry, callback in done:
            callback(self._apply(entry), 0)

    def refuse_one(self) -> None:
        if self.queued:
            entry, callback = self.queued.pop(self.rng.randrange(len(self.queued)))
            callback(None, QUEUE_FULL)

    def lose_leadership(self) -> None:
        """The next leader keeps a prefix of what was appended (committing it), the rest is
        truncated; what was queued here is forwarded and appended there, before or after the
        next leader's own activation entry."""
        keep = self.rng.randint(0, len(self.appended))
        kept, lost = self.appended[:keep], self.appended[keep:]
        forwarded, self.queued, self.appended = self.queued, [], []
        for entry, callback in kept:
            callback(self._apply(entry), 0)
        for entry, callback in lost:
            callback(None, NOT_LEADER)
        other = _entry(b"other-%d" % self.rng.randrange(10 ** 6), r.ACTIVATE, r.NoOpRecord())
        before = self.rng.random() < 0.5
        if before:
            apply(self.mlog, other)
        for entry, callback in forwarded:
            # pysyncobj answers the forwarding node once the new leader committed it
            callback(self._apply(entry), 0)
        if not before:
            apply(self.mlog, other)
        self.leader = False


class Run:
    """One seeded run: a controller proposing commands through `FlakyRaft` (module doc)."""

    def __init__(self, seed: int, fences: bool = True):
        self.rng = random.Random(seed)
        self.mlog = MetadataLog()
        self.raft = FlakyRaft(self.mlog, self.rng, fences)
        self.pipe = CommandPipeline(new_activation=lambda: b"me-%d" % self.rng.randrange(10 ** 9))
        self.qc = QuorumController()
        self.now = 0
        self.premises: dict[bytes, tuple] = {}  # entry → (proposal, index, image it assumes)
        self.answered: list = []                # proposals answered as committed
        self.violations: list[str] = []
        self.applied_state = MetadataImage()
        state = self.mlog.subscribe(self.on_committed)
        self.pipe.committed_upto(state.image, state.next_offset)
        self._apply_orig = self.raft._apply
        self.raft._apply = self.applying

    # the log applies an entry: was it computed on this very state?
    def applying(self, entry: bytes) -> int:
        before = self.mlog.image
        res = self._apply_orig(entry)
        premise = self.premises.get(entry)
        if premise is not None and res >= 0 and not premise[2].same_state(before):
            self.violations.append(f"entry {premise[1]} of a proposal for offset "
                                   f"{premise[0].end_offset} applied on another state")
        return res

    def on_committed(self, event) -> None:
        assert not isinstance(event, Reset)
        self.pipe.committed_upto(event.image, event.first + len(event.encoded))

    def propose(self, records: list, activate: bool = False):
        before = self.pipe.speculative if not activate else None
        p = self.pipe.activate(records) if activate else self.pipe.propose(records)
        image = before
        for i, entry in enumerate(p.entries):
            if image is not None:
                self.premises[entry] = (p, i, image)
                fence, items = r.unfence_entry(entry)
                image = image.apply_all(fence[1], [r.decode_record(x) for x in items])

            def callback(res, err, p=p):
                error = None if err == 0 and res >= 0 else f"failed ({err}, {res})"
                self.pipe.entry_done(p, error)
                if p.done and p.error is None and p.records and not p.activates:
                    if p not in self.answered:
                        self.answered.append(p)
            self.raft.propose(entry, callback)
        return p

    def command(self) -> None:
        self.qc.load_image(self.pipe.speculative)
        self.now += 100
        img, k = self.pipe.speculative, self.rng.randrange(8)
        name = f"t{self.rng.randrange(5)}"
        if k == 0:
            b = self.rng.randrange(3)
            recs, _ = self.qc.register_broker(b, f"i{b}-{self.rng.randrange(3)}", "h", 9092,
                                              None, self.now)
        elif k == 1 and img.brokers:
            b = self.rng.choice(sorted(img.brokers))
            recs, _ = self.qc.broker_heartbeat(b, img.brokers[b].broker_epoch, img.offset,
                                               False, False, self.now)
        elif k == 2:
            recs, _ = self.qc.create_topics([{"name": name,
                                              "replication_factor": self.rng.randint(1, 3),
                                              "num_partitions": self.rng.randint(1, 3)}])
        elif k == 6 and name in img.topics:
            # an ISR change from the leader, with the ISR as a list (as the handler passes it)
            t = img.topics[name]
            p = t.partitions[self.rng.choice(sorted(t.partitions))]
            leader = img.brokers.get(p.leader)
            isr = [p.leader] + [b for b in p.replicas if b != p.leader
                                and self.rng.random() < 0.5]
            recs, _ = self.qc.alter_partition(p.leader, leader.broker_epoch if leader else -1,
                                              t.topic_id, p.partition_id, p.leader_epoch,
                                              p.partition_epoch, isr)
        elif k == 7:
            recs, _ = self.qc.alter_client_quotas(
                [((("user", f"u{self.rng.randrange(2)}"),),
                  [("producer_byte_rate", float(self.rng.randrange(1, 10 ** 6)), False)])])
        elif k == 3:
            recs, _ = self.qc.delete_topics([name])
        elif k == 4:
            recs, _ = self.qc.create_partitions([(name, self.rng.randint(1, 6), None)])
        else:
            recs, _ = self.qc.incremental_alter_configs(
                [(2, name, [("retention.ms", 0, str(self.rng.randrange(10 ** 6)))])])
        assert self.qc.image is self.pipe.speculative       # commands never touch the image
        if recs:
            self.propose(recs)

    def step(self) -> None:
        raft, pipe = self.raft, self.pipe
        choice = self.rng.random()
        if not raft.leader:
            if choice < 0.3:
                raft.leader = True              # leadership comes back (a later term)
        elif not pipe.active and not any(p.activates for p in pipe.inflight):
            self.propose([r.NoOpRecord()], activate=True)
        elif choice < 0.45 and pipe.active:
            self.command()
        elif choice < 0.65:
            raft.append_some()
        elif choice < 0.92:
            raft.commit_some()
        elif choice < 0.95:
            raft.refuse_one()
        elif choice < 0.975 and pipe.inflight:
            # the service's commit timeout on the oldest proposal; its entries may still commit
            pipe.fail(pipe.inflight[0], "commit timed out")
        else:
            pipe.deactivate()                   # the service: no new commands ...
            raft.lose_leadership()              # ... and Raft reports what it will
        self.check()

    def check(self) -> None:
        replayed = MetadataImage().apply_all(
            0, [r.decode_record(x) for x in self.mlog.tail])
        assert replayed.same_state(self.mlog.image), "committed image != replayed records"
        assert self.pipe.committed is self.mlog.image
        if not self.pipe.inflight:
            assert self.pipe.speculative.same_state(self.pipe.committed)
        for p in self.answered:
            start = p.end_offset - len(p.records)
            got = [r.decode_record(x) for x in self.mlog.tail[start:p.end_offset]]
            assert got == p.records, "an answered command's records are not where it committed"


SEEDS = list(range(40))


@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_run_commits_only_what_was_computed_on_the_committed_state(seed):
    run = Run(seed)
    for _ in range(300):
        run.step()
    assert not run.violations, run.violations[:3]


def test_the_runs_commit_commands_and_fences_fire():
    fired = answered = 0
    for seed in SEEDS[:10]:
        run = Run(seed)
        for _ in range(300):
            run.step()
        fired += run.mlog.fenced_local
        answered += len(run.answered)
    assert fired > 0 and answered > 20


def test_control_without_fences_some_entry_applies_on_a_state_it_was_not_computed_on():
    broken = 0
    for seed in SEEDS[:20]:
        run = Run(seed, fences=False)
        try:
            for _ in range(300):
                run.step()
        except AssertionError:
            broken += 1                         # an answered command's records moved
            continue
        broken += bool(run.violations)
    assert broken > 0
