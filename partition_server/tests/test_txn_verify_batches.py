"""KIP-890 verifications a partition leader asks of a remote coordinator go out as Kafka's
AddPartitionsToTxnManager sends them (issue #23): one AddPartitionsToTxn v4 per coordinator at a
time, holding every transaction queued meanwhile, each transactional id once per request; the
answers are matched by transactional id; a coordinator that cannot be asked means
COORDINATOR_NOT_AVAILABLE (the Produce gets a retriable error).

The coordinator is played by the test: it records each request and answers when let."""

from __future__ import annotations

import trio

from common.connection import ConnectionClosed
from partition_server.txn.batches import Verifications
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import RESPONSES


class FakeCoordinator:
    def __init__(self):
        self.requests: list = []
        self.release = trio.Event()
        self.refuse = {"b"}                  # transactional ids whose partitions are not added
        self.forget = set()                  # transactional ids left out of the answer
        self.fail = False
        self._busy = trio.Lock()

    async def get(self, node):
        assert node == 3
        return self

    async def drop(self, node):
        pass

    async def request(self, req, version, timeout_s=30.0):
        assert version == 4 and all(t.verify_only for t in req.transactions)
        async with self._busy:
            self.requests.append(req)
            await self.release.wait()
            if self.fail:
                raise ConnectionClosed("coordinator went away")
            cls = RESPONSES[ApiKey.ADD_PARTITIONS_TO_TXN]
            code = {True: ErrorCode.INVALID_TXN_STATE, False: ErrorCode.NONE}
            return cls(error_code=0, results_by_transaction=[
                cls.AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=[
                    cls.AddPartitionsToTxnTopicResult(name=tp.name, results_by_partition=[
                        cls.AddPartitionsToTxnPartitionResult(
                            partition_index=p,
                            partition_error_code=code[t.transactional_id in self.refuse])
                        for p in tp.partitions]) for tp in t.topics])
                for t in req.transactions if t.transactional_id not in self.forget])


async def wait_for(cond) -> None:
    with trio.fail_after(5):
        while not cond():
            await trio.sleep(0.001)


async def test_verifications_queued_meanwhile_share_a_request_each_id_once():
    coordinator = FakeCoordinator()
    coordinator.forget = {"c"}
    verifier = Verifications(coordinator)
    got: dict = {}

    async def ask(name, tid, partition):
        got[name] = await verifier.verify(3, tid, 7, 0, [("t", partition)])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "a1", "a", 0)
        await wait_for(lambda: len(coordinator.requests) == 1)
        for name, tid, partition in (("b", "b", 1), ("a2", "a", 2), ("a3", "a", 3),
                                     ("c", "c", 4)):
            nursery.start_soon(ask, name, tid, partition)
        await wait_for(lambda: sum(len(q) for q in verifier.requests._queued.values()) == 4)
        coordinator.release.set()
    assert [sorted(t.transactional_id for t in req.transactions)
            for req in coordinator.requests] == [["a"], ["a", "b", "c"], ["a"]]
    assert got == {"a1": {("t", 0): ErrorCode.NONE}, "b": {("t", 1): ErrorCode.INVALID_TXN_STATE},
                   "a2": {("t", 2): ErrorCode.NONE}, "a3": {("t", 3): ErrorCode.NONE},
                   "c": {("t", 4): ErrorCode.INVALID_TXN_STATE}}       # not answered: refused
    assert verifier.requests.idle()


async def test_a_coordinator_that_cannot_be_asked_is_not_available():
    coordinator = FakeCoordinator()
    coordinator.fail = True
    coordinator.release.set()
    verifier = Verifications(coordinator)
    assert await verifier.verify(3, "a", 7, 0, [("t", 0), ("t", 1)]) == {
        ("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE, ("t", 1): ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert verifier.requests.idle()


async def test_a_coordinator_that_never_answers_is_not_available(autojump_clock):
    """The verification's bound (Verifications.TIMEOUT_S, a bare cancel scope)."""
    coordinator = FakeCoordinator()             # never released: never answers
    dropped = []

    async def drop(node):
        dropped.append(node)
    coordinator.drop = drop
    verifier = Verifications(coordinator)
    start = trio.current_time()
    assert await verifier.verify(3, "a", 7, 0, [("t", 0)]) == {
        ("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert trio.current_time() - start == Verifications.TIMEOUT_S and dropped == [3]
    assert verifier.requests.idle()
