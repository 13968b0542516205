"""CRC-32C (Castagnoli), the checksum of RecordBatch v2.

Uses the C `crc32c` package (hardware-accelerated where the CPU has it); falls back to a table
driven pure-Python version when the package is missing or `RAFTKA_PURE_CRC32C=1` is set (tests
check both agree). The fallback is ~100x slower: fine for tests, not for a broker.
"""

from __future__ import annotations

import os

_POLY = 0x82F63B78
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c_pure(data, value: int = 0) -> int:
    crc = value ^ 0xFFFFFFFF
    table = _TABLE
    for b in bytes(data):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:
    if os.environ.get("RAFTKA_PURE_CRC32C") == "1":
        raise ImportError("pure CRC-32C requested")
    from crc32c import crc32c as _c_crc32c

    def crc32c(data, value: int = 0) -> int:
        return _c_crc32c(data, value)

    IMPLEMENTATION = "c"
except ImportError:
    crc32c = crc32c_pure
    IMPLEMENTATION = "python"
