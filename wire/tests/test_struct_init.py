"""The compiled per-class `__init__` (wire/messages/runtime.py) behaves as the generic one did:
defaults for omitted fields, fresh mutable defaults per instance, TypeError for unknown fields,
and a subclass declaring other fields still gets its own."""

import pytest

from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS, RESPONSES
from wire.messages.runtime import F, Struct


def test_omitted_fields_take_their_defaults_and_mutable_ones_are_fresh():
    cls = RESPONSES[ApiKey.FETCH]
    a, b = cls.PartitionData(partition_index=3), cls.PartitionData()
    assert a.partition_index == 3 and b.partition_index == 0
    assert a.high_watermark == 0 and a.preferred_read_replica == -1 and a.records is None
    assert a.aborted_transactions == [] and a.aborted_transactions is not b.aborted_transactions
    assert a.diverging_epoch == cls.EpochEndOffset(epoch=-1, end_offset=-1)
    assert a.diverging_epoch is not b.diverging_epoch       # struct defaults are not shared
    r1, r2 = cls(), cls()
    r1.responses.append(1)
    assert r2.responses == []                               # nor are array defaults


def test_an_unknown_field_is_a_type_error():
    with pytest.raises(TypeError):
        REQUESTS[ApiKey.PRODUCE](acks=1, no_such_field=2)
    with pytest.raises(TypeError):
        REQUESTS[ApiKey.PRODUCE](-1)                        # keywords only, as before


def test_a_field_called_type_does_not_shadow_what_init_needs():
    cls = REQUESTS[ApiKey.LEADER_AND_ISR]
    assert cls(type=2).type == 2


def test_a_subclass_with_its_own_fields_is_initialised_by_its_own_fields():
    class Base(Struct):
        __slots__ = ("x",)
        FIELDS = (F("x", "int32", "0+", default="7"),)

    class Child(Base):
        __slots__ = ("y",)
        FIELDS = (F("x", "int32", "0+", default="7"), F("y", "int32", "0+", default="9"))

    assert Base().x == 7
    c = Child(y=1)
    assert (c.x, c.y) == (7, 1)
    assert Base(x=1) == Base(x=1) and Base(x=1) != Base(x=2)
