"""Prometheus text format (0.0.4) helpers shared by brokers and controllers."""

from __future__ import annotations


def labels(**kv) -> str:
    def esc(v) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in kv.items()) + "}"


def render_families(families) -> list[str]:
    """[(name, kind, help, [(labels, value)])] → lines."""
    lines = []
    for name, kind, doc, samples in families:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{lbl} {value}" for lbl, value in samples)
    return lines
