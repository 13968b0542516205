"""Seeded simulation of the idempotent producer state (txn/producer_state.py) under retries,
duplicated and reordered requests, lost responses and leader changes.

One producer keeps up to 5 batches in flight and retries every batch until it is acknowledged
(an acknowledgement of a batch completes the earlier ones too: sequences are contiguous).
The network delivers requests in any order, duplicates them and drops responses. A leader
change elects a replica holding a prefix of the log at least up to the high watermark; the new
leader rebuilds its producer state from that log (as a restarted or newly elected broker does),
and requests in flight to the old leader are lost. Invariants after every step: no sequence
number is in the log twice, the log's sequences are 0..n-1 in order, and every acknowledged
batch stays in the log. At the end every batch was appended exactly once.

`RAFTKA_SOAK=1` runs 500 seeds instead of 60; a failing run names its seed.
"""

import os
import random

import pytest

from partition_server.txn.producer_state import ProducerStateManager
from wire.errors import ErrorCode

SEEDS = range(500 if os.environ.get("RAFTKA_SOAK") else 60)
PID, EPOCH, MAX_IN_FLIGHT = 7, 0, 5


class Sim:
    def __init__(self, seed: int, batches: int):
        self.rng = random.Random(seed)
        self.total = batches
        self.log: list[tuple[int, int, int, int]] = []   # (first_seq, last_seq, first, last)
        self.high_watermark = 0
        self.state = ProducerStateManager()
        self.next_batch = 0
        self.sizes = [self.rng.randint(1, 4) for _ in range(batches)]
        self.first_seq = [sum(self.sizes[:i]) for i in range(batches)]
        self.unacked: set[int] = set()
        self.acked: set[int] = set()
        self.requests: list[int] = []                    # batch indexes on the wire
        self.responses: list[tuple[int, int]] = []       # (batch, last offset) acks on the wire

    def append(self, i: int) -> None:
        first, last = self.first_seq[i], self.first_seq[i] + self.sizes[i] - 1
        verdict = self.state.check(PID, EPOCH, first, last)
        if verdict.duplicate_of is not None:
            self.responses.append((i, verdict.duplicate_of.last_offset))
            return
        if verdict.error != ErrorCode.NONE:
            return                       # OUT_OF_ORDER / UNKNOWN: the producer retries later
        offset = self.log[-1][3] + 1 if self.log else 0
        self.log.append((first, last, offset, offset + self.sizes[i] - 1))
        self.state.update(PID, EPOCH, first, last, offset, offset + self.sizes[i] - 1)
        self.responses.append((i, offset + self.sizes[i] - 1))

    def leader_change(self) -> None:
        keep = self.rng.randint(self.high_watermark, len(self.log))
        del self.log[keep:]
        self.state = ProducerStateManager()
        for first, last, o1, o2 in self.log:             # the new leader's replay
            self.state.update(PID, EPOCH, first, last, o1, o2)
        self.requests.clear()
        self.responses.clear()

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.25 and self.next_batch < self.total and len(self.unacked) < MAX_IN_FLIGHT:
            self.unacked.add(self.next_batch)
            self.requests.append(self.next_batch)
            self.next_batch += 1
        elif r < 0.45 and self.unacked:                  # retry (timeout or error answer)
            self.requests.append(self.rng.choice(sorted(self.unacked)))
        elif r < 0.7 and self.requests:                  # deliver any request, maybe twice
            i = self.requests.pop(self.rng.randrange(len(self.requests)))
            self.append(i)
            if self.rng.random() < 0.1:
                self.append(i)
        elif r < 0.8:                                    # followers catch up
            self.high_watermark = self.rng.randint(self.high_watermark, len(self.log))
        elif r < 0.95 and self.responses:
            i, last = self.responses.pop(self.rng.randrange(len(self.responses)))
            if self.rng.random() < 0.2:
                return                                   # response lost
            entry = len([b for b in self.log if b[3] <= last])
            if entry <= self.high_watermark:             # acks=all: answered once replicated
                # sequences are appended contiguously, so an ack of batch i means every earlier
                # batch is in the log (the client completes them in order too)
                done = {j for j in self.unacked if j <= i}
                self.acked |= done | {i}
                self.unacked -= done
        elif r < 0.97:
            self.leader_change()

    def check(self) -> None:
        seqs = [s for first, last, _, _ in self.log for s in range(first, last + 1)]
        assert len(seqs) == len(set(seqs)), "a sequence was appended twice"
        assert seqs == list(range(len(seqs))), "sequences out of order"
        in_log = {self.first_seq.index(first) for first, *_ in self.log}
        assert self.acked <= in_log, "an acknowledged batch was lost"


@pytest.mark.parametrize("seed", SEEDS)
def test_no_sequence_appended_twice(seed):
    sim = Sim(seed, batches=40)
    for _ in range(20_000):
        sim.step()
        try:
            sim.check()
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from None
        if len(sim.acked) == sim.total:
            break
    assert len(sim.acked) == sim.total, f"seed {seed}: only {len(sim.acked)} acknowledged"
    assert [first for first, *_ in sim.log] == sim.first_seq, f"seed {seed}: log incomplete"
