"""KIP-890 verifications asked ahead (txn/ahead.py): after a marker, the partition leader asks
the coordinator about the producer's next transaction; the coordinator holds the question until
the partition joins it; the producer's first write then needs no round trip. An answer counts
only under the guard taken after that marker, for the marker's producer epoch, once."""

from __future__ import annotations

import types
import uuid

import trio

from partition_server.handlers.produce import handle_produce
from partition_server.log import LogConfig, PartitionLog
from partition_server.replica_manager import ReplicaManager
from partition_server.txn import ahead as A
from partition_server.txn.producer_state import ProducerStateManager
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES
from wire.records.batch import build_batch

TP, PID, EPOCH, TID = ("t", 0), 5, 3, "tx-ahead"


# -- the coordinator's side ---------------------------------------------------------------------

class Txns:
    """What the coordinator knows: the partitions of each id's ongoing transaction."""

    def __init__(self):
        self.ongoing: dict[str, set] = {}
        self.fenced: set = set()
        self.changes = A.TxnChanges()

    def verify(self, tid, pid, epoch, partitions):
        if tid in self.fenced:
            return {tp: ErrorCode.PRODUCER_FENCED for tp in partitions}
        return {tp: ErrorCode.NONE if tp in self.ongoing.get(tid, ()) else A.NOT_YET
                for tp in partitions}

    def add(self, tid, tp):
        self.ongoing.setdefault(tid, set()).add(tp)
        self.changes.changed(tid)


async def test_the_coordinator_holds_the_question_until_the_partition_joins(autojump_clock):
    txns = Txns()
    got = []

    async def ask():
        got.append(await A.verify_held(txns.verify, txns.changes,
                                       [(TID, PID, EPOCH, [TP]), ("other", 9, 0, [("t", 1)])],
                                       A.WAIT_MS))
        got.append(trio.current_time())

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.sleep(A.WAIT_MS / 4000)
        txns.add("unrelated", TP)               # another id's change: still held
        await trio.sleep(A.WAIT_MS / 4000)
        assert not got
        txns.add(TID, TP)
    assert got[0] == [{TP: ErrorCode.NONE}, {("t", 1): A.NOT_YET}]
    assert got[1] - start == A.WAIT_MS / 2000
    assert not txns.changes._waiting            # nothing left registered


async def test_the_coordinator_answers_at_its_deadline_or_at_once_when_refused(autojump_clock):
    txns = Txns()
    start = trio.current_time()
    assert await A.verify_held(txns.verify, txns.changes, [(TID, PID, EPOCH, [TP])],
                               60_000) == [{TP: A.NOT_YET}]
    assert trio.current_time() - start == A.WAIT_MS / 1000      # its own bound, not the asker's
    txns.fenced.add(TID)
    start = trio.current_time()
    assert await A.verify_held(txns.verify, txns.changes, [(TID, PID, EPOCH, [TP])],
                               A.WAIT_MS) == [{TP: ErrorCode.PRODUCER_FENCED}]
    assert trio.current_time() == start


# -- the leader's side --------------------------------------------------------------------------

class Coordinator:
    """Broker 1 as the leader's peers see it: records each request, answers from `txns`
    after `hold` seconds (or when released)."""

    def __init__(self, txns: Txns):
        self.txns = txns
        self.requests: list = []
        self.release = trio.Event()

    async def get(self, node):
        assert node == 1
        return self

    async def drop(self, node):
        pass

    async def request(self, req, version, timeout_s=30.0):
        assert version == 4 and req.raftka_wait_ms == A.WAIT_MS
        assert all(t.verify_only for t in req.transactions)
        self.requests.append(req)
        await self.release.wait()
        self.release = trio.Event()
        asked = [(t.transactional_id, t.producer_id, t.producer_epoch,
                  [(tp.name, p) for tp in t.topics for p in tp.partitions])
                 for t in req.transactions]
        cls = RESPONSES[ApiKey.ADD_PARTITIONS_TO_TXN]
        return cls(error_code=0, results_by_transaction=[
            cls.AddPartitionsToTxnResult(transactional_id=a[0], topic_results=[
                cls.AddPartitionsToTxnTopicResult(name=tp[0], results_by_partition=[
                    cls.AddPartitionsToTxnPartitionResult(partition_index=tp[1],
                                                          partition_error_code=err)])
                for tp, err in self.txns.verify(*a).items()]) for a in asked])


async def wait_for(cond) -> None:
    with trio.fail_after(5):
        while not cond():
            await trio.sleep(0.001)


def _leader(txns: Txns):
    coordinator = Coordinator(txns)
    ahead = A.VerifyAhead(coordinator, lambda tid: 1)
    return coordinator, ahead, ProducerStateManager()


def _marker(producers: ProducerStateManager, ahead: A.VerifyAhead, offset: int) -> None:
    producers.end_txn(PID, EPOCH, True, offset)           # as the marker's append does
    ahead.after_marker(TP, PID, EPOCH, producers)


async def test_an_answer_asked_ahead_verifies_one_write_of_that_epoch():
    txns = Txns()
    coordinator, ahead, producers = _leader(txns)
    _marker(producers, ahead, 0)
    assert not coordinator.requests                         # no transactional id known yet
    ahead.learned(PID, TID)
    _marker(producers, ahead, 1)
    await wait_for(lambda: coordinator.requests)
    txn = coordinator.requests[0].transactions[0]
    assert (txn.transactional_id, txn.producer_id, txn.producer_epoch) == (TID, PID, EPOCH)
    assert ahead.take(TP, PID, EPOCH, producers) is None    # not answered yet: not waited for
    txns.add(TID, TP)
    coordinator.release.set()
    await wait_for(lambda: ahead.asked[(TP, PID)].verified)
    assert ahead.take(TP, PID, EPOCH + 1, producers) is None           # another epoch
    guard = ahead.take(TP, PID, EPOCH, producers)
    assert guard is not None and producers.verification_holds(PID, guard)
    assert ahead.take(TP, PID, EPOCH, producers) is None and ahead.used == 1   # used up


async def test_a_marker_after_the_answer_voids_it():
    txns = Txns()
    txns.add(TID, TP)
    coordinator, ahead, producers = _leader(txns)
    ahead.learned(PID, TID)
    _marker(producers, ahead, 0)
    coordinator.release.set()
    await wait_for(lambda: ahead.asked[(TP, PID)].verified)
    producers.end_txn(PID, EPOCH, False, 1)                 # e.g. the transaction timed out
    assert ahead.take(TP, PID, EPOCH, producers) is None


async def test_an_answer_to_the_question_before_the_last_marker_is_not_used():
    """The first question's answer arrives after a second marker: it may describe the
    transaction that marker closed. Only the second question's answer counts."""
    txns = Txns()
    txns.add(TID, TP)
    coordinator, ahead, producers = _leader(txns)
    ahead.learned(PID, TID)
    _marker(producers, ahead, 0)
    await wait_for(lambda: coordinator.requests)
    _marker(producers, ahead, 1)
    coordinator.release.set()                               # answers the first: NONE
    await wait_for(lambda: len(coordinator.requests) == 2)  # the second goes out after it
    assert not ahead.asked[(TP, PID)].verified
    coordinator.release.set()
    await wait_for(lambda: ahead.asked[(TP, PID)].verified)
    assert ahead.take(TP, PID, EPOCH, producers) is not None


async def test_not_yet_is_asked_again_while_its_time_lasts(autojump_clock):
    txns = Txns()
    coordinator, ahead, producers = _leader(txns)
    ahead.learned(PID, TID)
    _marker(producers, ahead, 0)
    await wait_for(lambda: coordinator.requests)
    await trio.sleep(A.WAIT_MS / 1000)                      # as a coordinator holds it
    coordinator.release.set()                               # NOT_YET after a hold
    await wait_for(lambda: len(coordinator.requests) == 2)
    txns.add(TID, TP)
    coordinator.release.set()
    await wait_for(lambda: ahead.asked[(TP, PID)].verified)
    # an immediate NOT_YET (a coordinator that does not hold) is not asked again
    _marker(producers, ahead, 1)
    txns.ongoing.clear()
    await wait_for(lambda: len(coordinator.requests) == 3)
    coordinator.release.set()
    await wait_for(lambda: (TP, PID) not in ahead.asked)
    await trio.sleep(1)
    assert len(coordinator.requests) == 3


# -- a Produce that finds its answer asked ahead --------------------------------------------------

def _produce_setup(tmp_path, ask=True):
    replicas = ReplicaManager(0, lambda topic, partition, cfg: PartitionLog(
        str(tmp_path / f"{topic}-{partition}"), LogConfig.from_kafka({})))
    replicas.apply_partition("t", uuid.uuid4(), 0, [0], [0], 0, 1, 1, {}, 1, 0)
    producers = replicas.get(*TP).producers
    txns = Txns()
    txns.add(TID, TP)
    coordinator, ahead, _ = _leader(txns)
    ahead.learned(PID, TID)
    if ask:
        ahead.after_marker(TP, PID, EPOCH, producers)
    asked_again = []

    async def verify(*args):
        asked_again.append(args)
        return {tp: ErrorCode.NONE for tp in args[-1]}
    state = types.SimpleNamespace(leader=1)
    hctx = types.SimpleNamespace(
        image=types.SimpleNamespace(topics={"t": None, "__transaction_state": None},
                                    partition=lambda t, p: state if t != "t" else object()),
        replicas=replicas, broker_id=0,
        txn=types.SimpleNamespace(ahead=ahead, owns=lambda tid: ErrorCode.NOT_COORDINATOR,
                                  partition_of=lambda tid: 0,
                                  verifications=types.SimpleNamespace(verify=verify)))
    pr = REQUESTS[ApiKey.PRODUCE]
    batch = build_batch([(None, b"v", None, 1)], producer_id=PID, producer_epoch=EPOCH,
                        base_sequence=0, is_transactional=True)
    body = pr(transactional_id=TID, acks=1, timeout_ms=1000, topic_data=[pr.TopicProduceData(
        name="t", partition_data=[pr.PartitionProduceData(index=0, records=batch)])])
    req = types.SimpleNamespace(body=body, api_version=9)
    return hctx, req, coordinator, ahead, producers, asked_again


async def test_a_write_verified_ahead_is_appended_without_asking(tmp_path):
    hctx, req, coordinator, ahead, producers, asked_again = _produce_setup(tmp_path)
    coordinator.release.set()
    await wait_for(lambda: ahead.asked[(TP, PID)].verified)
    resp = await handle_produce(hctx, req)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert producers.first_unstable_offset() == 0 and ahead.used == 1
    assert not asked_again


async def test_a_write_waits_for_the_question_still_out_instead_of_asking(tmp_path):
    hctx, req, coordinator, ahead, producers, asked_again = _produce_setup(tmp_path)
    await wait_for(lambda: coordinator.requests)
    got = []

    async def produce():
        got.append(await handle_produce(hctx, req))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.sleep(0.01)
        assert not got                              # waiting for the answer on its way
        coordinator.release.set()
    assert got[0].responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert ahead.used == 1 and not asked_again


async def test_a_question_not_answered_in_time_leaves_the_write_to_ask(tmp_path, autojump_clock):
    hctx, req, coordinator, ahead, producers, asked_again = _produce_setup(tmp_path)
    await wait_for(lambda: coordinator.requests)
    start = trio.current_time()
    resp = await handle_produce(hctx, req)          # the coordinator never answers the first
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert trio.current_time() - start == A.JOIN_S
    assert ahead.used == 0 and len(asked_again) == 1


async def test_a_question_queued_behind_a_held_request_is_not_waited_for(tmp_path,
                                                                          autojump_clock):
    hctx, req, coordinator, ahead, producers, asked_again = _produce_setup(tmp_path, False)
    ahead.learned(PID + 1, "other")             # another producer's question, held
    ahead.after_marker(("t", 1), PID + 1, 0, ProducerStateManager())
    await wait_for(lambda: coordinator.requests)
    ahead.after_marker(TP, PID, EPOCH, producers)       # queued behind it
    await trio.sleep(0)
    assert [t.transactional_id for t in coordinator.requests[0].transactions] == ["other"]
    start = trio.current_time()
    resp = await handle_produce(hctx, req)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert trio.current_time() == start and len(asked_again) == 1
