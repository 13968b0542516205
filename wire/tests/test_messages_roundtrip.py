"""Every generated message at every version: decode(encode(m)) == m and encode(decode(b)) == b."""

import random

import pytest

from wire.messages.index_generated import ALL
from wire.testing import random_message

CASES = [(name, v) for name, cls in sorted(ALL.items())
         for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)]


def test_every_schema_is_generated():
    assert len(ALL) == 186
    assert len(CASES) > 600


@pytest.mark.parametrize("name", sorted(ALL))
def test_round_trip_every_version(name):
    cls = ALL[name]
    rng = random.Random(f"{name}")
    for version in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1):
        for _ in range(4):
            msg = random_message(cls, version, rng)
            data = msg.encode(version)
            back = cls.decode(data, version)
            assert back == msg, (name, version)
            assert back.encode(version) == data, (name, version)
        # defaults alone encode and decode too
        assert cls.decode(cls().encode(version), version) == cls()
