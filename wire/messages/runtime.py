"""Run-time support for the generated message classes.

The generated modules (`*_generated.py`) are readable field tables: one `Struct` subclass per
schema struct, one `Message` subclass per schema file, each with a `FIELDS` tuple of `F(...)`
specs copied from the JSON. On first use of a (class, version) pair this module compiles a
specialised encoder and decoder for it — straight-line Python with consecutive fixed-width fields
merged into one `struct` call — and caches them. That keeps the committed code small and easy to
review while the hot path runs no per-field interpretation. When the C extension is built,
program.py describes the same codecs as data for wire/messages/_codec.c to walk (a follower's
fetch request decodes 2.6x faster); the compiled Python here is then the reference the tests hold
the C code to.

Encoding rules (the schema README's): classic versions use int16-length strings and int32-length
bytes/arrays with -1 for null; flexible versions use compact lengths (uvarint N+1, 0 = null) and end
every struct with a tagged-field block. Tagged fields are written only when they differ from their
default, sorted by tag; unknown tags are kept raw and written back. A field absent from a version
must hold its default unless it is `ignorable`, else encoding raises `EncodeError`. A nullable
struct field is preceded by an int8 presence marker (-1 null, 1 present).

`records` fields decode to a `memoryview` slice of the input (no copy, no parsing) and encode from
any bytes-like object, or from an opaque object with an integer `size` (a file range for
`os.sendfile`), which `encode_chunks` hands back untouched in its place.
"""

from __future__ import annotations

import struct
from typing import Any

from wire.errors import DecodeError
from wire.messages.struct_init import default_source, lazy_init
from wire.primitives import (ZERO_UUID, read_uvarint, take, uuid_bytes, uvarint_bytes)

INF = 1 << 30


class EncodeError(ValueError):
    """Local misuse: a value that cannot be encoded at the requested version."""


def parse_versions(spec) -> tuple[int, int] | None:
    """"N", "N-M", "N+" or "none" → (lo, hi) or None."""
    if spec is None or spec == "none":
        return None
    spec = str(spec).strip()
    if spec.endswith("+"):
        return int(spec[:-1]), INF
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def _in(rng, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


_FIXED = {"bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
          "int64": "q", "float64": "d"}
_FIXED_SIZE = {"?": 1, "b": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "d": 8}
_MISSING = object()


class F:
    """One field of a schema struct, as written in the generated tables."""

    __slots__ = ("name", "type", "versions", "nullable", "tagged", "tag", "default",
                 "ignorable", "flexible", "struct", "about", "is_array", "elem")

    def __init__(self, name: str, type: str, versions: str, *, nullable: str | None = None,
                 tagged: str | None = None, tag: int | None = None, default: Any = _MISSING,
                 ignorable: bool = False, flexible: str | None = "__inherit__",
                 struct: type | None = None, about: str = ""):
        self.name = name
        self.type = type
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tagged = parse_versions(tagged)
        self.tag = None if tag is None else int(tag)   # schemas spell it "0": sort 2 < 10
        self.ignorable = ignorable
        # a field-level flexibleVersions override (RequestHeader.ClientId keeps classic encoding)
        self.flexible = flexible if flexible == "__inherit__" else parse_versions(flexible)
        self.struct = struct
        self.about = about
        self.is_array = type.startswith("[]")
        self.elem = type[2:] if self.is_array else type
        self.default = self._resolve_default(default)

    def _resolve_default(self, default):
        if default == "null":
            return None
        if self.is_array:
            return None if default is None else _MISSING      # fresh [] per instance
        t = self.elem
        if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
            if default is _MISSING or default == "":
                return 0
            return int(default, 0) if isinstance(default, str) else int(default)
        if t == "float64":
            return 0.0 if default in (_MISSING, "") else float(default)
        if t == "bool":
            return default in (True, "true") if default is not _MISSING else False
        if t == "string":
            return "" if default is _MISSING else default
        if t == "bytes":
            return b"" if default is _MISSING else default
        if t == "records":
            return None
        if t == "uuid":
            return ZERO_UUID
        if t == "struct":
            return _MISSING                                    # fresh instance per object
        raise ValueError(f"unknown field type {self.type}")

    def make_default(self):
        if self.default is not _MISSING:
            return self.default
        if self.is_array:
            return []
        return self.struct()

    def present(self, v: int) -> bool:
        return _in(self.versions, v)

    def is_tagged(self, v: int) -> bool:
        return _in(self.tagged, v) and self.present(v)


class Struct:
    """Base of every generated struct and message class."""

    __slots__ = ("_unknown_tagged",)
    FIELDS: tuple = ()
    _codecs: dict

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls._codecs = {}
        if "__init__" not in cls.__dict__:
            # its own __init__, compiled at its first construction (struct_init.py says why)
            cls.__init__ = lazy_init(cls, _MISSING)

    def __init__(self, **kwargs):
        for f in self.FIELDS:
            if f.name in kwargs:
                setattr(self, f.name, kwargs.pop(f.name))
            else:
                setattr(self, f.name, f.make_default())
        self._unknown_tagged = None
        if kwargs:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(kwargs)}")

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in self.FIELDS)

    def __repr__(self):
        parts = ", ".join(f"{f.name}={_short(getattr(self, f.name))}" for f in self.FIELDS)
        return f"{type(self).__name__}({parts})"

    @classmethod
    def _codec(cls, version: int, flexible: bool, lenient: bool = False):
        key = (version, flexible, lenient)
        codec = cls._codecs.get(key)
        if codec is None:
            from wire.messages.program import build     # C when built, else _compile below
            codec = cls._codecs[key] = build(cls, version, flexible, lenient)
        return codec


def _short(value):
    if isinstance(value, memoryview):
        return f"<{value.nbytes} bytes>"
    if isinstance(value, (bytes, bytearray)) and len(value) > 32:
        return f"<{len(value)} bytes>"
    return repr(value)


class Message(Struct):
    """A top-level schema: request, response, header or embedded data."""

    __slots__ = ()
    API_KEY: int | None = None
    NAME = ""
    TYPE = ""
    VALID_VERSIONS = (0, 0)
    FLEXIBLE_VERSIONS: tuple[int, int] | None = None
    LATEST_VERSION_UNSTABLE = False
    LISTENERS: tuple[str, ...] = ()

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return _in(cls.FLEXIBLE_VERSIONS, version)

    @classmethod
    def check_version(cls, version: int) -> bool:
        return cls.VALID_VERSIONS[0] <= version <= cls.VALID_VERSIONS[1]

    def encode_into(self, out: bytearray, version: int, opaque: list | None = None,
                    lenient: bool = False) -> None:
        """With `lenient`, fields the version cannot carry are dropped instead of refused: a
        server fills a response with everything it knows and each version keeps what it has."""
        # (version, lenient) -> encoder, once the version was checked: every request and
        # answer passes here, and the checks were most of a small message's encode in C
        enc = self._codecs.get((version, lenient))
        if enc is None:
            if not self.check_version(version):
                raise EncodeError(f"{self.NAME} has no version {version}")
            enc = self._codecs[(version, lenient)] = \
                self._codec(version, self.is_flexible(version), lenient)[0]
        try:
            enc(self, out, opaque)
        except (struct.error, TypeError, AttributeError, UnicodeEncodeError, OverflowError) as exc:
            raise EncodeError(f"{self.NAME} v{version}: {exc}") from None

    def encode(self, version: int) -> bytes:
        out = bytearray()
        self.encode_into(out, version, None)
        return bytes(out)

    def encode_chunks(self, version: int, lenient: bool = False) -> list:
        """Bytes and opaque records objects (with `.size`) in wire order."""
        out = bytearray()
        opaque: list = []
        self.encode_into(out, version, opaque, lenient)
        if not opaque:
            return [bytes(out)]
        chunks: list = []
        start = 0
        for pos, obj in opaque:
            if pos > start:
                chunks.append(bytes(out[start:pos]))
            chunks.append(obj)
            start = pos
        if start < len(out):
            chunks.append(bytes(out[start:]))
        return chunks

    @classmethod
    def decode_from(cls, buf, pos: int, version: int):
        """Decode at `pos`; returns (message, end position). Garbage raises DecodeError."""
        dec = cls._codecs.get(version)         # the decoder, once the version was checked
        if dec is None:
            if not cls.check_version(version):
                raise DecodeError(f"{cls.NAME} has no version {version}")
            dec = cls._codecs[version] = cls._codec(version, cls.is_flexible(version))[1]
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        try:
            return dec(mv, pos)
        except DecodeError:
            raise
        except (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError,
                RecursionError) as exc:
            raise DecodeError(f"{cls.NAME} v{version}: {exc}") from None

    @classmethod
    def decode(cls, buf, version: int, strict: bool = True):
        """Decode a whole buffer; with `strict`, trailing bytes are an error."""
        msg, end = cls.decode_from(buf, 0, version)
        if strict and end != len(buf):
            raise DecodeError(f"{cls.NAME} v{version}: {len(buf) - end} trailing bytes")
        return msg


# ---------------------------------------------------------------------------------------------
# The compiler: (struct class, version, flexible) → (encode(obj, out, opaque), decode(mv, pos))

class _Src:
    def __init__(self):
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {}
        self._n = 0

    def const(self, value, hint="c") -> str:
        self._n += 1
        name = f"_{hint}{self._n}"
        self.ns[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


def _field_flexible(f: F, version: int, flexible: bool) -> bool:
    if f.flexible == "__inherit__":
        return flexible
    return _in(f.flexible, version)


def field_layout(cls, version: int, flexible: bool) -> tuple[list, list, list]:
    """(positional fields in wire order, tagged fields by tag, fields the version lacks): what
    both codecs are built from (this module's compiler and program.py's C programs)."""
    positional = [f for f in cls.FIELDS if f.present(version) and not f.is_tagged(version)]
    tagged = sorted((f for f in cls.FIELDS if f.is_tagged(version)), key=lambda f: f.tag)
    absent = [f for f in cls.FIELDS if not f.present(version)]
    if not flexible and tagged:
        # tagged fields only exist in flexible versions; schema data says so, be defensive
        return positional, [], absent + tagged
    return positional, tagged, absent


def _compile(cls, version: int, flexible: bool, lenient: bool = False):
    enc_src, dec_src = _Src(), _Src()
    for src in (enc_src, dec_src):
        src.ns.update(DecodeError=DecodeError, EncodeError=EncodeError, take=take,
                      read_uvarint=read_uvarint, uvb=uvarint_bytes, uuid_bytes=uuid_bytes,
                      UUID=_uuid_from, struct=struct, new=object.__new__, cls=cls,
                      encode_records=_encode_records, MISSING=_MISSING)
    positional, tagged, absent = field_layout(cls, version, flexible)
    enc_src.emit(0, "def enc(o, b, opaque):")
    for f in absent:
        if not f.ignorable and not lenient:
            dflt = enc_src.const(f, "f")
            enc_src.emit(1, f"if not _is_default({dflt}, o.{f.name}):")
            enc_src.emit(2, f"raise EncodeError('field {f.name} is not supported in "
                            f"{cls.__name__} version {version}')")
    enc_src.ns["_is_default"] = _is_default
    _emit_positional(enc_src, dec_src, positional, version, flexible, lenient)
    dec_src.lines.insert(0, "def dec(mv, pos):")
    dec_src.lines.insert(1, "    o = new(cls)")
    for f in absent:
        dec_src.emit(1, f"o.{f.name} = {default_source(f, _MISSING, dec_src.ns, f'_a_{f.name}_')}")
    if flexible:
        _emit_tagged(enc_src, dec_src, cls, tagged, version, lenient)
    else:
        dec_src.emit(1, "o._unknown_tagged = None")
    enc_src.emit(1, "return None")
    dec_src.emit(1, "return o, pos")
    enc_ns, dec_ns = enc_src.ns, dec_src.ns
    exec(compile("\n".join(enc_src.lines), f"<enc {cls.__name__} v{version}>", "exec"), enc_ns)
    exec(compile("\n".join(dec_src.lines), f"<dec {cls.__name__} v{version}>", "exec"), dec_ns)
    return enc_ns["enc"], dec_ns["dec"]


_DEFAULT_STRUCTS: dict[type, Struct] = {}


def _is_default(f: F, value) -> bool:
    if f.default is _MISSING:
        if f.is_array:
            return value is not None and len(value) == 0
        # one cached default instance: a fresh one per check cost a follower fetch answer
        # three struct constructions per partition (its tagged fields)
        default = _DEFAULT_STRUCTS.get(f.struct)
        if default is None:
            default = _DEFAULT_STRUCTS[f.struct] = f.struct()
        return value == default
    return value == f.default if value is not None else f.default is None


def _uuid_from(buf) -> Any:
    import uuid
    return uuid.UUID(bytes=bytes(buf))


def _encode_records(b: bytearray, value, flexible: bool, nullable: bool, opaque) -> None:
    if value is None:
        if not nullable:
            raise EncodeError("records field is not nullable here")
        b += b"\x00" if flexible else b"\xff\xff\xff\xff"
        return
    if isinstance(value, (bytes, bytearray, memoryview)):
        n = len(value) if not isinstance(value, memoryview) else value.nbytes
        b += uvarint_bytes(n + 1) if flexible else struct.pack(">i", n)
        b += value
        return
    size = value.size
    if opaque is None:
        raise EncodeError("an opaque records object needs encode_chunks()")
    b += uvarint_bytes(size + 1) if flexible else struct.pack(">i", size)
    opaque.append((len(b), value))


def _emit_positional(enc: _Src, dec: _Src, fields: list[F], version: int, flexible: bool,
                     lenient: bool = False) -> None:
    group: list[F] = []

    def flush():
        if not group:
            return
        fmt = ">" + "".join(_FIXED[f.elem] for f in group)
        size = sum(_FIXED_SIZE[c] for c in fmt[1:])
        s_enc, s_dec = enc.const(struct.Struct(fmt), "s"), dec.const(struct.Struct(fmt), "s")
        enc.emit(1, f"b += {s_enc}.pack({', '.join('o.' + f.name for f in group)})")
        targets = ", ".join("o." + f.name for f in group)
        dec.emit(1, f"{targets}{',' if len(group) == 1 else ''} = {s_dec}.unpack_from(mv, pos)")
        dec.emit(1, f"pos += {size}")
        group.clear()

    for f in fields:
        if not f.is_array and f.elem in _FIXED:
            group.append(f)
            continue
        flush()
        _emit_value(enc, dec, f, f"o.{f.name}", f"o.{f.name}", version,
                    _field_flexible(f, version, flexible), flexible, 1, lenient)
    flush()


def _emit_value(enc: _Src, dec: _Src, f: F, src: str, dst: str, version: int, flex: bool,
                struct_flex: bool, ind: int, lenient: bool = False) -> None:
    """Emit encode of expression `src` and decode into target `dst` for field `f`."""
    nullable = _in(f.nullable, version)
    name = f.name
    if f.is_array:
        _emit_array(enc, dec, f, src, dst, version, flex, struct_flex, ind, lenient, nullable)
        return
    t = f.elem
    if t in _FIXED:
        s = struct.Struct(">" + _FIXED[t])
        se, sd = enc.const(s, "s"), dec.const(s, "s")
        enc.emit(ind, f"b += {se}.pack({src})")
        dec.emit(ind, f"{dst}, = {sd}.unpack_from(mv, pos)")
        dec.emit(ind, f"pos += {s.size}")
    elif t == "uuid":
        enc.emit(ind, f"b += uuid_bytes({src})")
        dec.emit(ind, "e = take(mv, pos, 16)")
        dec.emit(ind, f"{dst} = UUID(mv[pos:e])")
        dec.emit(ind, "pos = e")
    elif t in ("string", "bytes"):
        _emit_string_or_bytes(enc, dec, t, src, dst, name, version, flex, nullable, ind, lenient)
    elif t == "records":
        enc.emit(ind, f"encode_records(b, {src}, {flex}, {nullable}, opaque)")
        _emit_length(dec, flex, False, ind, dst, nullable, f"records {name}")
        dec.emit(ind + 1, "e = take(mv, pos, n)")
        dec.emit(ind + 1, f"{dst} = mv[pos:e]")
        dec.emit(ind + 1, "pos = e")
    elif t == "struct":
        se = enc.const(f.struct, "S")
        sd = dec.const(f.struct, "S")
        enc.emit(ind, f"v = {src}")
        dec_call = f"{sd}._codec({version}, {struct_flex})[1](mv, pos)"
        enc_call = f"{se}._codec({version}, {struct_flex}, {lenient})[0](v, b, opaque)"
        if nullable:
            enc.emit(ind, "if v is None:")
            enc.emit(ind + 1, "b += b'\\xff'")
            enc.emit(ind, "else:")
            enc.emit(ind + 1, "b += b'\\x01'")
            enc.emit(ind + 1, enc_call)
            dec.emit(ind, "m, = struct.unpack_from('>b', mv, pos)")
            dec.emit(ind, "pos += 1")
            dec.emit(ind, "if m < 0:")
            dec.emit(ind + 1, f"{dst} = None")
            dec.emit(ind, "else:")
            dec.emit(ind + 1, f"{dst}, pos = {dec_call}")
        else:
            enc.emit(ind, enc_call)
            dec.emit(ind, f"{dst}, pos = {dec_call}")
    else:
        raise ValueError(f"unknown type {f.type}")


def _emit_length(dec: _Src, flex: bool, short: bool, ind: int, dst: str, nullable: bool,
                 what: str) -> None:
    """Decode a length into `n`, then a null (-1) into `dst = None`, or a DecodeError naming
    `what` when the field is not nullable; opens the `else:` the caller's value goes under."""
    if flex:
        dec.emit(ind, "n, pos = read_uvarint(mv, pos)")
        dec.emit(ind, "n -= 1")
    elif short:
        dec.emit(ind, "n, = struct.unpack_from('>h', mv, pos)")
        dec.emit(ind, "pos += 2")
    else:
        dec.emit(ind, "n, = struct.unpack_from('>i', mv, pos)")
        dec.emit(ind, "pos += 4")
    dec.emit(ind, "if n < 0:")
    dec.emit(ind + 1, f"{dst} = None" if nullable else f"raise DecodeError('null {what}')")
    dec.emit(ind, "else:")


def _emit_string_or_bytes(enc, dec, t, src, dst, name, version, flex, nullable, ind,
                          lenient=False):
    short = t == "string"
    enc.emit(ind, f"v = {src}")
    if lenient and not nullable:
        # responses: a null where this version cannot carry one goes out empty
        enc.emit(ind, "if v is None:")
        enc.emit(ind + 1, "v = ''" if short else "v = b''")
    enc.emit(ind, "if v is None:")
    if nullable:
        null = "b'\\x00'" if flex else ("b'\\xff\\xff'" if short else "b'\\xff\\xff\\xff\\xff'")
        enc.emit(ind + 1, f"b += {null}")
    else:
        enc.emit(ind + 1, f"raise EncodeError('{name} is not nullable in version {version}')")
    enc.emit(ind, "else:")
    if short:
        enc.emit(ind + 1, "v = v.encode('utf-8')")
    if flex:
        enc.emit(ind + 1, "b += uvb(len(v) + 1)")
    else:
        enc.emit(ind + 1, f"b += struct.pack('{'>h' if short else '>i'}', len(v))")
    enc.emit(ind + 1, "b += v")
    _emit_length(dec, flex, short, ind, dst, nullable, f"{t} {name}")
    dec.emit(ind + 1, "e = take(mv, pos, n)")
    dec.emit(ind + 1, f"{dst} = str(mv[pos:e], 'utf-8')" if short else f"{dst} = bytes(mv[pos:e])")
    dec.emit(ind + 1, "pos = e")


def _emit_array(enc: _Src, dec: _Src, f: F, src: str, dst: str, version: int, flex: bool,
                struct_flex: bool, ind: int, lenient: bool, nullable: bool) -> None:
    """An array field: its length, or null, then the elements (`_emit_array_body`)."""
    name = f.name
    enc.emit(ind, f"v = {src}")
    enc.emit(ind, "if v is None:")
    if nullable:
        enc.emit(ind + 1, "b += " + ("b'\\x00'" if flex else "b'\\xff\\xff\\xff\\xff'"))
    elif lenient:
        enc.emit(ind + 1, "v = []")      # lenient (responses): null where the version has none
        enc.emit(ind + 1, "b += " + ("b'\\x01'" if flex else "b'\\x00\\x00\\x00\\x00'"))
    else:
        enc.emit(ind + 1, f"raise EncodeError('{name} is not nullable in version {version}')")
    enc.emit(ind, "else:")
    enc.emit(ind + 1, "b += uvb(len(v) + 1)" if flex else "b += struct.pack('>i', len(v))")
    _emit_length(dec, flex, False, ind, dst, nullable, f"array {name}")
    _emit_array_body(enc, dec, f, dst, version, flex, struct_flex, ind + 1, lenient)


def _emit_array_body(enc, dec, f: F, dst: str, version, flex, struct_flex, ind, lenient) -> None:
    t = f.elem
    if t in _FIXED:
        code = _FIXED[t]
        size = _FIXED_SIZE[code]
        enc.emit(ind, f"b += struct.pack('>%d{code}' % len(v), *v)")
        dec.emit(ind, f"e = take(mv, pos, n * {size})")
        dec.emit(ind, f"{dst} = list(struct.unpack_from('>%d{code}' % n, mv, pos))")
        dec.emit(ind, "pos = e")
        return
    # every element takes at least one byte, so a count above the bytes left is garbage
    dec.emit(ind, "take(mv, pos, n)")
    dec.emit(ind, "lst = []")
    dec.emit(ind, "for _ in range(n):")
    enc.emit(ind, "for x in v:")
    elem = F(f.name, t, "0+", struct=f.struct, flexible=None)
    elem.versions = (version, version)
    _emit_value(enc, dec, elem, "x", "x", version, flex, struct_flex, ind + 1, lenient)
    dec.emit(ind + 1, "lst.append(x)")
    dec.emit(ind, f"{dst} = lst")


def _emit_tagged(enc: _Src, dec: _Src, cls, tagged: list[F], version: int,
                 lenient: bool = False) -> None:
    enc.emit(1, "tg = []")
    for f in tagged:
        fld = enc.const(f, "f")
        enc.emit(1, f"if not _is_default({fld}, o.{f.name}):")
        enc.emit(2, "outer, b = b, bytearray()")
        _emit_value(enc, _Src(), f, f"o.{f.name}", "_", version, True, True, 2, lenient)
        enc.emit(2, f"tg.append(({f.tag}, b))")
        enc.emit(2, "b = outer")
    enc.emit(1, "if o._unknown_tagged:")
    enc.emit(2, "tg.extend(o._unknown_tagged)")
    enc.emit(2, "tg.sort(key=lambda t: t[0])")
    enc.emit(1, "b += uvb(len(tg))")
    enc.emit(1, "for tag, data in tg:")
    enc.emit(2, "b += uvb(tag)")
    enc.emit(2, "b += uvb(len(data))")
    enc.emit(2, "b += data")

    for f in tagged:
        dec.emit(1, f"o.{f.name} = {default_source(f, _MISSING, dec.ns, f'_t_{f.name}_')}")
    dec.emit(1, "o._unknown_tagged = None")
    dec.emit(1, "nt, pos = read_uvarint(mv, pos)")
    dec.emit(1, "take(mv, pos, nt * 2)")
    dec.emit(1, "last = -1")
    dec.emit(1, "for _ in range(nt):")
    dec.emit(2, "tag, pos = read_uvarint(mv, pos)")
    dec.emit(2, "size, pos = read_uvarint(mv, pos)")
    dec.emit(2, "end = take(mv, pos, size)")
    dec.emit(2, "if tag <= last:")
    dec.emit(3, "raise DecodeError('tagged fields out of order')")
    dec.emit(2, "last = tag")
    first = True
    for f in tagged:
        dec.emit(2, f"{'if' if first else 'elif'} tag == {f.tag}:")
        first = False
        dec.emit(3, "whole, mv = mv, mv[:end]")
        _emit_value(_Src(), dec, f, "_", f"o.{f.name}", version, True, True, 3)
        dec.emit(3, "mv = whole")
    if tagged:
        dec.emit(2, "else:")
        ind = 3
    else:
        ind = 2
    dec.emit(ind, "if o._unknown_tagged is None:")
    dec.emit(ind + 1, "o._unknown_tagged = []")
    dec.emit(ind, "o._unknown_tagged.append((tag, bytes(mv[pos:end])))")
    dec.emit(2, "pos = end")
