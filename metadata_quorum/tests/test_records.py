"""Metadata record encoding: every type round-trips; anything unreadable is MetadataRecordError."""

import dataclasses
import uuid

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from metadata_quorum import records as r


def sample(cls):
    values = {"int": 3, "str": "x", "bool": True, "bytes": b"\x01\x02", "tuple": (1, 2),
              "float": 1.5}
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name in ("topic_id", "acl_id"):
            kw[f.name] = uuid.UUID(int=7)
        elif f.name in ("log_dirs", "directories"):         # tuples of directory ids
            kw[f.name] = (uuid.UUID(int=8), uuid.UUID(int=9))
        else:
            kind = str(f.type).split("|")[0].strip()
            kw[f.name] = values.get(kind, 1)
    return cls(**kw)


@pytest.mark.parametrize("cls", sorted(r.RECORD_TYPES.values(), key=lambda c: c.TYPE),
                         ids=lambda c: c.__name__)
def test_every_type_round_trips(cls):
    rec = sample(cls)
    assert r.decode_record(r.encode_record(rec)) == rec


def test_type_ids_are_kafka_metadata_api_keys():
    assert r.RegisterBrokerRecord.TYPE == 0 and r.TopicRecord.TYPE == 2
    assert r.PartitionRecord.TYPE == 3 and r.PartitionChangeRecord.TYPE == 5
    assert r.NoOpRecord.TYPE == 20 and r.BrokerRegistrationChangeRecord.TYPE == 17


def test_unknown_type_and_newer_version_are_clear_errors():
    with pytest.raises(r.MetadataRecordError, match="undecodable"):
        r.decode_record(msgpack.packb([999, 0, {}]))
    with pytest.raises(r.MetadataRecordError, match="newer"):
        r.decode_record(msgpack.packb([r.NoOpRecord.TYPE, 5, {}]))
    with pytest.raises(r.MetadataRecordError, match="uuid"):
        r.decode_record(msgpack.packb([r.TopicRecord.TYPE, 0, {"name": "t", "topic_id": b"x"}]))


def test_batch_round_trip_and_bad_batch():
    recs = [r.NoOpRecord(), r.TopicRecord("t", uuid.UUID(int=1))]
    assert r.decode_batch(r.encode_batch(recs)) == recs
    with pytest.raises(r.MetadataRecordError):
        r.decode_batch(msgpack.packb({"not": "a list"}))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_bytes_raise_only_metadata_record_error(data):
    try:
        r.decode_record(data)
    except r.MetadataRecordError:
        pass
