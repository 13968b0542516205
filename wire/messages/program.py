"""Message codecs in C: the field tables as programs for wire/messages/_codec.c.

runtime._compile writes a Python encoder and decoder per (struct class, version, flexible,
lenient); this module describes the same thing as data — one op per field in wire order, the
fields a version lacks with their defaults, the tagged fields by tag — and the C extension walks
it. The rules are runtime's own (`_field_flexible`, `_in`, `default_source`'s defaults, the
lenient cases), so both produce the same bytes and the same objects; the Python compiler is the
reference, used when the extension is not built (no C compiler) or RAFTKA_PURE_PYTHON=1, and
wire/tests/test_message_codec_c.py compares the two on every message and version.

Why: decoding and encoding messages was 13-17 % of the brokers' busy time in the RF 3
transactions benchmark (py-spy, bench/README.md "Message codecs in C"), most of it the
interpreter stepping through the generated code a field at a time.
"""

from __future__ import annotations

from wire.errors import DecodeError
from wire.messages import runtime
from wire.messages.runtime import (_MISSING, EncodeError, F, _field_flexible, _in,
                                   field_layout)
from wire.native import load_extension
from wire.primitives import uuid_bytes

CODEC_VERSION = 1                   # must equal CODEC_VERSION in _codec.c
C, UNUSED_BECAUSE = load_extension("wire.messages._codec", CODEC_VERSION)
IMPLEMENTATION = "c" if C is not None else "python"

_KIND = {"bool": 1, "int8": 2, "int16": 3, "uint16": 4, "int32": 5, "uint32": 6, "int64": 7,
         "float64": 8, "string": 9, "bytes": 10, "records": 11, "uuid": 12, "struct": 13}
_ARRAY = 14


def _sort_tagged(known: list, unknown: list) -> list:
    """runtime's enc: known tags, then the unknown ones kept from decoding, stable by tag."""
    tagged = known + list(unknown)
    tagged.sort(key=lambda t: t[0])
    return tagged


if C is not None:
    C.configure(DecodeError, EncodeError, runtime._is_default, runtime._uuid_from, uuid_bytes,
                _sort_tagged)


def build(cls, version: int, flexible: bool, lenient: bool = False):
    """(encode(obj, out, opaque), decode(mv, pos)) for runtime's codec cache: the C program's
    when the extension is built, else runtime's compiled Python."""
    if C is None:
        return runtime._compile(cls, version, flexible, lenient)
    prog = program(cls, version, flexible, lenient)
    return prog.encode, prog.decode


def program(cls, version: int, flexible: bool, lenient: bool = False):
    """The C Program of `cls` at (version, flexible, lenient), cached beside its codecs."""
    key = ("program", version, flexible, lenient)
    prog = cls._codecs.get(key)
    if prog is None:
        prog = cls._codecs[key] = _build_program(cls, version, flexible, lenient)
    return prog


def _build_program(cls, version: int, flexible: bool, lenient: bool):
    positional, tagged, absent = field_layout(cls, version, flexible)
    ops = tuple(_op(f, f.name, version, _field_flexible(f, version, flexible), flexible, lenient)
                for f in positional)
    absent_specs = tuple(
        _default(f, None if f.ignorable or lenient else
                 f"field {f.name} is not supported in {cls.__name__} version {version}")
        for f in absent)
    tagged_specs = tuple((f.tag, _op(f, f.name, version, True, True, lenient), _default(f, None))
                         for f in tagged) if flexible else None
    return C.Program(cls, ops, absent_specs, tagged_specs, flexible, _MISSING)


def _default(f: F, error: str | None) -> tuple:
    """(name, constant or MISSING, factory for a fresh one, field, EncodeError text or None,
    default instance and its field names for a struct, whether an array): struct_init's
    defaults (a mutable default is never shared) and what runtime._is_default compares."""
    if f.default is not _MISSING:
        return (f.name, f.default, None, f, error, None, None, False)
    if f.is_array:
        return (f.name, _MISSING, list, f, error, None, None, True)
    return (f.name, _MISSING, f.struct, f, error, f.struct(),
            tuple(g.name for g in f.struct.FIELDS), False)


def _op(f: F, name: str | None, version: int, flex: bool, struct_flex: bool,
        lenient: bool) -> tuple:
    """(kind, attribute, flex, nullable, lenient, sub-program, element op, what, not-nullable
    text) for one field at one version: runtime._emit_value's cases."""
    nullable = _in(f.nullable, version)
    not_nullable = f"{f.name} is not nullable in version {version}"
    if f.is_array:
        elem = F(f.name, f.elem, "0+", struct=f.struct, flexible=None)
        elem.versions = (version, version)
        return (_ARRAY, name, flex, nullable, lenient, None,
                _op(elem, None, version, flex, struct_flex, lenient), f"array {f.name}",
                not_nullable)
    kind = _KIND.get(f.elem)
    if kind is None:
        raise ValueError(f"unknown type {f.type}")
    sub = program(f.struct, version, struct_flex, lenient) if f.elem == "struct" else None
    return (kind, name, flex, nullable, lenient, sub, None, f"{f.elem} {f.name}", not_nullable)
