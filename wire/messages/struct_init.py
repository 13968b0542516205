"""Compiled `__init__` for the generated message structs (wire/messages/runtime.py).

Each generated class gets, at its first construction, its own keyword-only `__init__`: one
assignment per field with the defaults bound as constants. Handlers build several structs per
partition of every answer (a follower fetch answer: a PartitionData and, through its tagged
fields' defaults, three more), and the generic loop over the field table with `setattr` was
most of what building one cost. `missing` is runtime's marker for "no literal default"."""

from __future__ import annotations

from typing import Any


def lazy_init(cls, missing):
    def __init__(self, **kwargs):
        init = cls.__init__ = compile_init(cls, missing)
        init(self, **kwargs)
    return __init__


def compile_init(cls, missing):
    """`__init__(self, *, field=default, ...)` for `cls`: an omitted field gets its default
    (a fresh list or struct where the default is mutable); an unknown keyword is a TypeError.
    Names the code needs besides the fields start with `_R_` (a field may be called `type`)."""
    ns: dict[str, Any] = {"_R_MISSING": missing}
    params, body = [], []
    for i, f in enumerate(cls.FIELDS):
        params.append(f"{f.name}=_R_MISSING")
        fresh = default_source(f, missing, ns, f"_R_{i}_")
        body.append(f"    self.{f.name} = {fresh} if {f.name} is _R_MISSING else {f.name}")
    src = "\n".join([f"def __init__(self{', *, ' if params else ''}{', '.join(params)}):",
                     *body, "    self._unknown_tagged = None"])
    exec(compile(src, f"<init {cls.__name__}>", "exec"), ns)
    return ns["__init__"]


def default_source(f, missing, ns: dict, prefix: str) -> str:
    """An expression for field `f`'s default, without a call to `F.make_default`: the literal
    bound in `ns` as a constant, or a fresh list / struct (a mutable default is never shared).
    The compiled `__init__` and the decoders (absent and tagged fields: a follower fetch answer
    has three tagged structs per partition) use it; the method call showed in profiles."""
    if f.default is not missing:
        ns[prefix + "d"] = f.default
        return prefix + "d"
    if f.is_array:
        return "[]"
    ns[prefix + "s"] = f.struct
    return prefix + "s()"
