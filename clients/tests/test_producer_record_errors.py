"""KIP-467 in our producer: the records a broker names in `record_errors` fail with their own
message, the rest of the refused batch with the batch's error (futures and callbacks alike)."""

from __future__ import annotations

import types

from clients.cluster import TopicPartition
from clients.errors import error
from clients.producer.accumulator import DeliveryFuture, ProducerBatch
from clients.producer.sender import _name_bad_records
from wire.errors import ErrorCode


def test_named_records_get_their_own_error():
    b = ProducerBatch(TopicPartition("t", 2), 0, 0.0, 0, (0,))
    for key in (b"a", None, b"c"):
        b.append(key, b"v", None, 1000)
    b.adopt([None] * 3, [1000] * 3)         # what the accumulator keeps beside the records
    futures = [DeliveryFuture(b, i) for i in range(3)]
    seen = []
    for f in futures:
        f.add_callback(lambda meta, exc: seen.append((meta, exc)))
    p = types.SimpleNamespace(error_code=ErrorCode.INVALID_RECORD, record_errors=[
        types.SimpleNamespace(batch_index=1, batch_index_error_message="no key here")])
    _name_bad_records(b, p)
    batch_error = error(ErrorCode.INVALID_RECORD, "One or more records have been rejected")
    b.complete(-1, -1, batch_error)
    assert futures[0].exception() is batch_error and futures[2].exception() is batch_error
    own = futures[1].exception()
    assert own.code == ErrorCode.INVALID_RECORD and "t-2 record 1" in str(own) and \
        "no key here" in str(own)
    assert [exc for _meta, exc in seen] == [batch_error, own, batch_error]
    assert all(meta is None for meta, _exc in seen)
