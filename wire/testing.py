"""Shared test helpers for the wire package: random message values that respect a version."""

from __future__ import annotations

import random
import uuid

from wire.messages.runtime import Message, Struct, _in


def random_value(f, version: int, rng: random.Random, depth: int = 0, flexible: bool = True):
    """A random value for field `f` valid at `version` (None only where nullable)."""
    if _in(f.nullable, version) and rng.random() < 0.2:
        return None
    if f.is_array:
        n = rng.randint(0, 3 if depth < 2 else 1)
        return [_random_scalar(f.elem, f, version, rng, depth + 1) for _ in range(n)]
    return _random_scalar(f.elem, f, version, rng, depth)


def _random_scalar(t: str, f, version: int, rng: random.Random, depth: int):
    if t == "bool":
        return rng.random() < 0.5
    if t == "int8":
        return rng.randint(-128, 127)
    if t == "int16":
        return rng.randint(-32768, 32767)
    if t == "uint16":
        return rng.randint(0, 65535)
    if t == "int32":
        return rng.choice([0, -1, 1, rng.randint(-2**31, 2**31 - 1)])
    if t == "uint32":
        return rng.randint(0, 2**32 - 1)
    if t == "int64":
        return rng.choice([0, -1, rng.randint(-2**63, 2**63 - 1)])
    if t == "float64":
        return rng.choice([0.0, 1.5, -2.25e10])
    if t == "string":
        return rng.choice(["", "a", "topic-é", "x" * rng.randint(0, 40)])
    if t == "bytes":
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 20)))
    if t == "records":
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 70)))
    if t == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if t == "struct":
        return random_struct(f.struct, version, rng, depth + 1)
    raise ValueError(t)


def random_struct(cls: type[Struct], version: int, rng: random.Random, depth: int = 0) -> Struct:
    """An instance with every field present at `version` randomised, others left default."""
    obj = cls()
    for f in cls.FIELDS:
        if f.present(version):
            setattr(obj, f.name, random_value(f, version, rng, depth))
    return obj


def random_message(cls: type[Message], version: int, rng: random.Random) -> Message:
    return random_struct(cls, version, rng)
