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
        if f.default is not missing:
            ns[f"_R_d{i}"] = f.default
            fresh = f"_R_d{i}"
        elif f.is_array:
            fresh = "[]"
        else:
            ns[f"_R_s{i}"] = f.struct
            fresh = f"_R_s{i}()"
        body.append(f"    self.{f.name} = {fresh} if {f.name} is _R_MISSING else {f.name}")
    src = "\n".join([f"def __init__(self{', *, ' if params else ''}{', '.join(params)}):",
                     *body, "    self._unknown_tagged = None"])
    exec(compile(src, f"<init {cls.__name__}>", "exec"), ns)
    return ns["__init__"]
