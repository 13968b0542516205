"""Kafka `.properties` files and the small parsers every node and client share (one copy).

- `parse_properties(text)`: the Java .properties subset Kafka's own files use — `key=value` or
  `key: value` lines, `#`/`!` comments, blank lines; the first `=` or `:` separates.
- `load_properties(path)`: the same from a file; a read or parse problem is a `ConfigError`
  naming the file.
- `parse_endpoint` (`NAME://host:port`) and `parse_voters` (`id@host:port,...`).
"""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """A config file, override or property value that cannot be used; the message names the key."""


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset: key=value or key: value lines, # and ! comments, blank lines."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i > 0]
        if not seps:
            raise ConfigError(f"line {lineno}: expected key=value, got {raw!r}")
        i = min(seps)
        out[line[:i].strip()] = line[i + 1:].strip()
    return out


def load_properties(path: str | Path) -> dict[str, str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return parse_properties(text)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_endpoint(listener: str) -> tuple[str, str, int]:
    """`NAME://host:port` → (NAME, host, port)."""
    name, sep, rest = listener.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise ConfigError(f"listener {listener!r}: expected NAME://host:port")
    return name.upper(), host, int(port)


def parse_voters(voters) -> dict[int, tuple[str, int]]:
    """`id@host:port` entries (list or comma string) → {id: (host, port)}."""
    if isinstance(voters, str):
        voters = [v for v in voters.split(",") if v.strip()]
    result: dict[int, tuple[str, int]] = {}
    for entry in voters:
        node, at, address = entry.strip().partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not node.isdigit() or not colon or not port.isdigit():
            raise ConfigError(f"voter entry {entry!r}: expected id@host:port")
        result[int(node)] = (host, int(port))
    return result
