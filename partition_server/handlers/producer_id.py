"""InitProducerId for idempotent (non-transactional) producers.

Producer ids come in blocks of 1,000 from the controller (AllocateProducerIds, committed as a
ProducerIdsRecord, so ids are never reused across brokers or restarts). Every call hands out a
fresh id with epoch 0 — also when a producer asks to bump its epoch (KIP-360): a new id is the
simplest correct answer without a transaction coordinator. A request with a transactional id
goes to the transaction coordinator (handlers/txn.py, which sends only the others here); one
reaching this handler anyway is answered COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import trio

from partition_server.controller_client import ControllerClient, ControllerUnavailable
from partition_server.handlers.context import HandlerContext
from wire.errors import ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES


class ProducerIdBlock:
    """Producer ids handed out from blocks the controller allocates to this broker; given the
    controller client (the call, and this broker's epoch) and our broker id."""

    def __init__(self, client: ControllerClient, broker_id: int):
        self.client = client
        self.broker_id = broker_id
        self.next_id = 0
        self.end = 0
        self.lock = trio.Lock()

    async def allocate(self) -> int | None:
        async with self.lock:
            if self.next_id >= self.end:
                cls = REQUESTS[ApiKey.ALLOCATE_PRODUCER_IDS]
                try:
                    resp = await self.client.call_active(
                        cls(broker_id=self.broker_id, broker_epoch=self.client.broker_epoch),
                        timeout_s=10, error_of=lambda r: r.error_code)
                except ControllerUnavailable:
                    return None
                if resp.error_code != ErrorCode.NONE:
                    return None
                self.next_id = resp.producer_id_start
                self.end = resp.producer_id_start + resp.producer_id_len
            pid = self.next_id
            self.next_id += 1
            return pid


async def handle_init_producer_id(hctx: HandlerContext, req):
    cls = RESPONSES[ApiKey.INIT_PRODUCER_ID]
    if req.body.transactional_id is not None:
        return cls(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1)
    pid = await hctx.producer_ids.allocate()
    if pid is None:
        return cls(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1)
    return cls(error_code=0, producer_id=pid, producer_epoch=0)
