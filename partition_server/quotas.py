"""Client quotas: the pure part (KIP-13 byte rates, KIP-55 user principals, KIP-124 request
time, KIP-219 throttling after the response). No sockets, no clocks: callers pass `now_ms`.

Entities (their tables are `common.quotas`, shared with the controller). A quota is configured
on an entity, a tuple of (entity_type, name|None) pairs sorted by type, where the types are
`user` and `client-id` and a None name is the default ("<default>"). Configured quotas live in the metadata image (`ClientQuotaRecord`s).

Resolution (Kafka's DefaultQuotaCallback, KIP-55): for one quota key, the first configured entity
in this order applies to a request from (user U, client id C):

    1. user=U, client-id=C           5. user=<default>, client-id=<default>
    2. user=U, client-id=<default>   6. user=<default>
    3. user=U                        7. client-id=C
    4. user=<default>, client-id=C   8. client-id=<default>

Clients are metered together per *bucket*: the (user, client id) tags of the matched entity, with
the unnamed part blank, so a quota on user U alone is shared by all of U's client ids, while a
`<default>` quota gives every user (or client id) a bucket of its own.

Rate windows (Kafka's SampledStat + Rate): `quota.window.num` samples of
`quota.window.size.seconds` each. A sample older than num × size is dropped. The rate is the sum
of the samples over the elapsed time since the oldest sample started, but never over less than
num − 1 whole windows: that floor is why a fresh client may burst about (num − 1) × size × quota
bytes before the first throttle, exactly as in Kafka.

Throttle time (QuotaUtils.throttleTime): after recording a value, if the rate exceeds the bound,
`(rate − bound) / bound × window_ms`, the time during which sending nothing brings the rate back
to the bound. Request-time throttles are capped at one window (Kafka bounds only that one).
"""

from __future__ import annotations

import dataclasses

from common.quotas import (  # noqa: F401 - the tables, re-exported for the broker's modules
                           CLIENT_ID, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, DEFAULT_WINDOW_NUM,
                           DEFAULT_WINDOW_SIZE_MS, IP, PRODUCER_BYTE_RATE, QUOTA_KEYS, REQUEST_PERCENTAGE,
                           UNSUPPORTED_KEYS, USER, canonical, entity, validate_entity, validate_value)


# -- resolution ---------------------------------------------------------------------------------

def user_of(principal: str) -> str:
    """Kafka quotas name users by the principal's name ("User:alice" → "alice")."""
    return principal.split(":", 1)[1] if ":" in principal else principal


def _candidates(user: str, client_id: str):
    """(entity, bucket tags) in Kafka's precedence order."""
    return (
        (entity(user, client_id), (user, client_id)),
        (entity(user, None), (user, client_id)),
        (entity(user), (user, "")),
        (entity(None, client_id), (user, client_id)),
        (entity(None, None), (user, client_id)),
        (entity(None), (user, "")),
        (entity(client_id=client_id), ("", client_id)),
        (entity(client_id=None), ("", client_id)),
    )


def resolve(quotas: dict, user: str, client_id: str, key: str):
    """(bucket, bound, entity) of the quota `key` applying to (user, client_id), or None when
    none is configured (the client is unlimited)."""
    for ent, bucket in _candidates(user, client_id):
        values = quotas.get(ent)
        if values and key in values:
            return bucket, float(values[key]), ent
    return None


# -- rate windows -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class WindowConfig:
    num: int = DEFAULT_WINDOW_NUM              # quota.window.num
    size_ms: int = DEFAULT_WINDOW_SIZE_MS      # quota.window.size.seconds × 1000


class Rate:
    """A sliding rate over `num` samples of `size_ms` (Kafka's Rate on a SampledStat)."""

    __slots__ = ("config", "samples", "last_used_ms")

    def __init__(self, config: WindowConfig = WindowConfig()):
        self.config = config
        self.samples: list[list[float]] = []      # [start_ms, value], oldest first
        self.last_used_ms = 0.0

    def _purge(self, now_ms: float) -> None:
        expire = self.config.num * self.config.size_ms
        self.samples = [s for s in self.samples if now_ms - s[0] < expire]

    def record(self, value: float, now_ms: float) -> None:
        self._purge(now_ms)
        self.last_used_ms = now_ms
        if not self.samples or now_ms >= self.samples[-1][0] + self.config.size_ms:
            self.samples.append([now_ms, 0.0])
            if len(self.samples) > self.config.num:
                del self.samples[0]
        self.samples[-1][1] += value

    def window_ms(self, now_ms: float) -> float:
        """Elapsed time since the oldest sample, at least num − 1 whole windows."""
        elapsed = now_ms - self.samples[0][0] if self.samples else 0.0
        full = int(elapsed // self.config.size_ms)
        floor = self.config.num - 1
        if full < floor:
            elapsed += (floor - full) * self.config.size_ms
        return elapsed

    def total(self, now_ms: float) -> float:
        self._purge(now_ms)
        return sum(v for _, v in self.samples)

    def measure(self, now_ms: float) -> float:
        """Per second."""
        total = self.total(now_ms)
        window = self.window_ms(now_ms)
        return total * 1000.0 / window if window > 0 else 0.0


def throttle_time_ms(rate: float, bound: float, window_ms: float) -> int:
    """Kafka's QuotaUtils.throttleTime: how long to send nothing so the rate falls to the bound."""
    if rate <= bound or bound <= 0:
        return 0
    return int(round((rate - bound) / bound * window_ms))


# -- the manager ----------------------------------------------------------------------------------

class QuotaManager:
    """Per broker: one `Rate` per (quota key, bucket). `quotas` is the image's
    {entity: {key: value}}, replaced whenever a new image arrives."""

    IDLE_EXPIRY_MS = 3600_000                  # Kafka expires idle quota sensors after an hour

    def __init__(self, config: WindowConfig = WindowConfig()):
        self.config = config
        self.quotas: dict = {}
        self.rates: dict[tuple, Rate] = {}     # (key, bucket) -> Rate
        self.throttled_ms: dict[tuple, int] = {}   # (key, bucket) -> total throttle handed out
        self._last_expiry_ms = 0.0

    def update(self, quotas: dict) -> None:
        if quotas is not self.quotas:
            self.quotas = quotas

    def has(self, key: str) -> bool:
        return any(key in values for values in self.quotas.values())

    def bound(self, principal: str, client_id: str | None, key: str) -> float | None:
        found = resolve(self.quotas, user_of(principal), client_id or "", key)
        return found[1] if found else None

    def max_value_in_window(self, principal: str, client_id: str | None, key: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: the most one fetch may return (bound × (num − 1)
        windows), so a single huge response cannot earn an hour of throttling."""
        bound = self.bound(principal, client_id, key)
        if bound is None:
            return None
        return bound * (self.config.num - 1) * self.config.size_ms / 1000.0

    def _rate(self, key: str, bucket: tuple) -> Rate:
        rate = self.rates.get((key, bucket))
        if rate is None:
            rate = self.rates[(key, bucket)] = Rate(self.config)
        return rate

    def record(self, principal: str, client_id: str | None, key: str, value: float,
               now_ms: float, max_throttle_ms: int | None = None) -> int:
        """Record `value` for the client's bucket; the throttle time it earned (0 if none or no
        quota applies)."""
        found = resolve(self.quotas, user_of(principal), client_id or "", key)
        if found is None:
            return 0
        bucket, bound, _ = found
        if now_ms - self._last_expiry_ms > 60_000:     # one meter per client id: keep it bounded
            self.expire_idle(now_ms)
        rate = self._rate(key, bucket)
        rate.record(value, now_ms)
        throttle = throttle_time_ms(rate.measure(now_ms), bound, rate.window_ms(now_ms))
        if max_throttle_ms is not None:
            throttle = min(throttle, max_throttle_ms)
        if throttle:
            self.throttled_ms[(key, bucket)] = self.throttled_ms.get((key, bucket), 0) + throttle
        return throttle

    def throttle_now(self, principal: str, client_id: str | None, key: str, now_ms: float) -> int:
        """The throttle the client's bucket has earned so far, recording nothing."""
        found = resolve(self.quotas, user_of(principal), client_id or "", key)
        rate = self.rates.get((key, found[0])) if found else None
        if rate is None or not rate.samples:
            return 0
        return throttle_time_ms(rate.measure(now_ms), found[1], rate.window_ms(now_ms))

    def unrecord(self, principal: str, client_id: str | None, key: str, value: float,
                 now_ms: float) -> None:
        """Take back a recorded value (a throttled fetch is answered empty: its bytes were never
        sent)."""
        found = resolve(self.quotas, user_of(principal), client_id or "", key)
        if found is not None:
            self._rate(key, found[0]).record(-value, now_ms)

    def expire_idle(self, now_ms: float) -> None:
        idle = [k for k, r in self.rates.items() if now_ms - r.last_used_ms > self.IDLE_EXPIRY_MS]
        for k in idle:
            del self.rates[k]
            self.throttled_ms.pop(k, None)
        self._last_expiry_ms = now_ms
