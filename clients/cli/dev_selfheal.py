"""`raftka dev` switches self-healing on (issue 19 item 6): once the cluster is ready, the
dynamic cluster-wide configs `raftka.balancer.enable=true` (balancer.py) and
`raftka.rereplication.timeout.ms=60000` (rereplication.py) are set — each only if it has no
dynamic value yet, so a user's own choice (`raftka configs --alter --entity-default ...`) survives
a restart. Production configs leave both off (their defaults)."""

from __future__ import annotations

import trio

from clients.admin import AdminClient, AlterConfigOp, ConfigResource, ConfigResourceType

DEV_DYNAMIC_DEFAULTS = {"raftka.balancer.enable": "true",
                        "raftka.rereplication.timeout.ms": "60000"}
DYNAMIC = ("DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG")


async def _enable(bootstrap: str, security, broker_id: int) -> dict[str, str]:
    async with AdminClient(bootstrap, security=security) as admin:
        res = ConfigResource(ConfigResourceType.BROKER, str(broker_id))
        entries = (await admin.describe_configs([res])).get(res)
        have = {e.name for e in entries if e.source in DYNAMIC} if isinstance(entries, list) \
            else set()
        wanted = {k: v for k, v in DEV_DYNAMIC_DEFAULTS.items() if k not in have}
        if wanted:
            default = ConfigResource(ConfigResourceType.BROKER, "")
            result = await admin.incremental_alter_configs(
                {default: [AlterConfigOp(k, v) for k, v in wanted.items()]})
            if result.get(default) is not None:
                raise result[default]
        return wanted


def enable(layout) -> str:
    """Set the dev defaults on the cluster of `layout` (a dev.DevLayout); a line saying what was
    set (or why not: the cluster still runs)."""
    from common.security import PLAINTEXT, ClientSecurity
    security = PLAINTEXT
    if layout.secure:           # the super user may alter cluster configs
        from clients.cli.secure_dev import SecureDev
        security = ClientSecurity.from_properties(SecureDev(layout).client_properties())
    try:
        wanted = trio.run(_enable, layout.bootstrap_servers, security, layout.broker_ids[0])
    except Exception as exc:        # noqa: BLE001 — a dev convenience must not stop the cluster
        return f"raftka dev: self-healing not switched on: {exc}"
    if not wanted:
        return "raftka dev: self-healing settings already set (kept)"
    return "raftka dev: self-healing on: " + ", ".join(f"{k}={v}" for k, v in wanted.items())
