"""Finalized features and SCRAM credentials (Kafka's FeatureControlManager, KIP-584/KIP-778,
and ScramControlManager, KIP-554).

Feature state: absent (level 0) ──UpdateFeatures upgrade──▶ level n ──downgrade (only when the
request allows it)──▶ lower level; level 0 removes it. Levels outside the supported range are
refused. SCRAM state per (user, mechanism): absent ──upsert──▶ stored ──delete──▶ absent. Only
the salted form (salt, StoredKey, ServerKey, iterations) ever reaches the log: the salted
password is turned into keys here and dropped (RFC 5802).
"""

from __future__ import annotations

import dataclasses

from common.sasl import SCRAM_SHA_256, SCRAM_SHA_512, scram_keys
from metadata_quorum import records as r
from metadata_quorum.image import MetadataImage
from wire.errors import ErrorCode

# feature name → (min, max) supported level
SUPPORTED_FEATURES = {"metadata.version": (1, 20), "kraft.version": (0, 1),
                      "transaction.version": (0, 2), "group.version": (0, 1)}
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
_HASHES = (SCRAM_SHA_256, SCRAM_SHA_512)           # the mechanisms we derive keys for
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


@dataclasses.dataclass(frozen=True)
class FeatureUpdate:
    name: str
    max_version_level: int
    upgrade_type: int = UPGRADE


def update_features(image: MetadataImage, updates: list[FeatureUpdate], validate_only=False):
    """All-or-nothing, like Kafka: any bad update fails the whole request's records."""
    records, results = [], []
    for u in updates:
        current = image.features.get(u.name, 0)
        lo, hi = SUPPORTED_FEATURES.get(u.name, (None, None))
        if lo is None:
            results.append((u.name, ErrorCode.INVALID_UPDATE_VERSION, "unknown feature"))
        elif u.max_version_level != 0 and not lo <= u.max_version_level <= hi:
            results.append((u.name, ErrorCode.INVALID_UPDATE_VERSION,
                            f"level {u.max_version_level} outside supported [{lo}, {hi}]"))
        elif u.max_version_level < current and u.upgrade_type == UPGRADE:
            results.append((u.name, ErrorCode.INVALID_UPDATE_VERSION,
                            "downgrade requested without a downgrade type"))
        else:
            results.append((u.name, ErrorCode.NONE, None))
            if u.max_version_level != current:
                records.append(r.FeatureLevelRecord(u.name, u.max_version_level))
    if validate_only or any(code != ErrorCode.NONE for _, code, _ in results):
        records = []
    return records, results


@dataclasses.dataclass(frozen=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


def alter_user_scram_credentials(image: MetadataImage, deletions: list[tuple[str, int]],
                                 upsertions: list[ScramUpsertion]):
    """Returns (records, {user: (error, message)}); a user named twice in one request fails."""
    records, results = [], {}
    users = [n for n, _ in deletions] + [u.name for u in upsertions]
    dup = {n for n in users if users.count(n) > 1}
    for name, mech in deletions:
        if name in dup:
            results[name] = (ErrorCode.DUPLICATE_RESOURCE, "user named more than once")
        elif mech not in _HASHES:
            results[name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"mechanism {mech}")
        elif (name, mech) not in image.scram:
            results[name] = (ErrorCode.RESOURCE_NOT_FOUND, "no such credential")
        else:
            results[name] = (ErrorCode.NONE, None)
            records.append(r.RemoveUserScramCredentialRecord(name, mech))
    for u in upsertions:
        if u.name in dup:
            results[u.name] = (ErrorCode.DUPLICATE_RESOURCE, "user named more than once")
        elif u.mechanism not in _HASHES:
            results[u.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"mechanism {u.mechanism}")
        elif not u.name or not u.salt or not u.salted_password:
            results[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "empty user, salt or password")
        elif not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
            results[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                               f"iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
        else:
            stored, server = scram_keys(u.mechanism, u.salted_password)
            results[u.name] = (ErrorCode.NONE, None)
            records.append(r.UserScramCredentialRecord(u.name, u.mechanism, u.salt, stored,
                                                       server, u.iterations))
    return records, results
