"""SASL as pure state machines: the server side of PLAIN (RFC 4616) and SCRAM-SHA-256/512
(RFC 5802, RFC 7677), as Kafka's SaslServer implementations behave, and the one SCRAM client
(`ScramClient`) and key derivation (`scram_keys`, `make_credential`) every part of raftka uses.

Each mechanism object is fed the client's tokens with `evaluate(token) -> challenge bytes`; it
raises `SaslAuthenticationError` (→ SASL_AUTHENTICATION_FAILED) on a bad token or bad
credentials, and `complete`/`principal` say when and as whom the client authenticated.

SCRAM states: INITIAL ──client-first──▶ SENT_SERVER_FIRST ──client-final (proof ok)──▶ COMPLETE;
anything else ──▶ FAILED (the object refuses further tokens). PLAIN: INITIAL ──message──▶
COMPLETE | FAILED.

Credentials come from a `CredentialLookup` callable: (user, mechanism) → `ScramCredential` or
None. Only salted keys are ever stored (salt, StoredKey, ServerKey, iterations); PLAIN verifies a
password by deriving the StoredKey from the user's SCRAM salt and comparing, so the same store
serves both mechanisms and no clear password exists anywhere.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import os
from typing import Callable

SCRAM_SHA_256, SCRAM_SHA_512 = 1, 2                  # Kafka's ScramMechanism type codes
MECHANISM_NAMES = {"SCRAM-SHA-256": SCRAM_SHA_256, "SCRAM-SHA-512": SCRAM_SHA_512}
_HASH = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MAX_TOKEN_BYTES = 8192                               # no honest SASL token is larger


class SaslAuthenticationError(Exception):
    """The client failed to authenticate (bad token, unknown user, wrong password)."""


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


CredentialLookup = Callable[[str, int], "ScramCredential | None"]


def salted_password(mechanism: int, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) of RFC 5802 (SASLprep is the identity for ASCII)."""
    return hashlib.pbkdf2_hmac(_HASH[mechanism], password.encode(), salt, iterations)


def scram_keys(mechanism: int, salted: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) from a salted password."""
    algo = _HASH[mechanism]
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    return (hashlib.new(algo, client_key).digest(),
            hmac.new(salted, b"Server Key", algo).digest())


def make_credential(mechanism: int, password: str, iterations: int = 4096,
                    salt: bytes | None = None) -> ScramCredential:
    salt = salt if salt is not None else os.urandom(32)
    stored, server = scram_keys(mechanism, salted_password(mechanism, password, salt, iterations))
    return ScramCredential(salt, stored, server, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise SaslAuthenticationError("invalid base64 in SCRAM message") from None


def _decode_saslname(name: str) -> str:
    """RFC 5802 saslname: ',' and '=' travel as '=2C' and '=3D'; any other '=' is an error."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i:i + 3]
            if code == "=2C":
                out.append(",")
            elif code == "=3D":
                out.append("=")
            else:
                raise SaslAuthenticationError("invalid escape in SCRAM username")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _attributes(text: str) -> list[tuple[str, str]]:
    attrs = []
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or len(key) != 1:
            raise SaslAuthenticationError(f"malformed SCRAM attribute {part[:40]!r}")
        attrs.append((key, value))
    return attrs


class PlainServer:
    """RFC 4616: one message `authzid NUL authcid NUL passwd`."""

    mechanism_name = "PLAIN"

    def __init__(self, lookup: CredentialLookup):
        self._lookup = lookup
        self.complete = False
        self.failed = False
        self.principal: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete or self.failed:
            raise SaslAuthenticationError("PLAIN exchange already finished")
        self.failed = True                       # until proven otherwise
        parts = bytes(token).split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError("PLAIN message must be authzid NUL user NUL password")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("PLAIN message is not UTF-8") from None
        if not user or not password:
            raise SaslAuthenticationError("PLAIN user and password must not be empty")
        if authzid and authzid != user:
            raise SaslAuthenticationError("authorization id must match the user")
        if not verify_password(self._lookup, user, password):
            raise SaslAuthenticationError("Authentication failed: invalid credentials")
        self.failed = False
        self.complete = True
        self.principal = user
        return b""


def verify_password(lookup: CredentialLookup, user: str, password: str) -> bool:
    """True when `password` matches any stored SCRAM credential of `user`."""
    for mechanism in (SCRAM_SHA_512, SCRAM_SHA_256):
        cred = lookup(user, mechanism)
        if cred is None:
            continue
        stored, _ = scram_keys(mechanism, salted_password(mechanism, password, cred.salt,
                                                          cred.iterations))
        if hmac.compare_digest(stored, cred.stored_key):
            return True
    return False


class ScramServer:
    """RFC 5802 server side, without channel binding (Kafka does not offer it either)."""

    def __init__(self, mechanism: int, lookup: CredentialLookup,
                 nonce: Callable[[], str] | None = None):
        self.mechanism = mechanism
        self.mechanism_name = {v: k for k, v in MECHANISM_NAMES.items()}[mechanism]
        self._algo = _HASH[mechanism]
        self._lookup = lookup
        self._nonce = nonce or (lambda: _b64(os.urandom(24)))
        self.state = "INITIAL"
        self.principal: str | None = None
        self._cred: ScramCredential | None = None
        self._client_first_bare = self._server_first = self._gs2 = self._full_nonce = ""

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE"

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            self.state = "FAILED"
            raise SaslAuthenticationError("SCRAM message is not UTF-8") from None
        try:
            if self.state == "INITIAL":
                return self._client_first(text)
            if self.state == "SENT_SERVER_FIRST":
                return self._client_final(text)
            raise SaslAuthenticationError(f"unexpected SCRAM message in state {self.state}")
        except SaslAuthenticationError:
            self.state = "FAILED"
            raise

    def _client_first(self, text: str) -> bytes:
        # gs2-header: cbind-flag "," [authzid] ","; we support "n" (and "y": client could but
        # thinks we cannot), never "p" (channel binding).
        flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y"):
            raise SaslAuthenticationError("channel binding is not supported")
        attrs = _attributes(bare)
        if attrs and attrs[0][0] == "m":
            raise SaslAuthenticationError("mandatory SCRAM extensions are not supported")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise SaslAuthenticationError("client-first must start with n=user,r=nonce")
        user = _decode_saslname(attrs[0][1])
        client_nonce = attrs[1][1]
        if not user or not client_nonce:
            raise SaslAuthenticationError("empty user or nonce")
        if authzid and _decode_saslname(authzid.removeprefix("a=")) != user:
            raise SaslAuthenticationError("authorization id must match the user")
        cred = self._lookup(user, self.mechanism)
        if cred is None:
            raise SaslAuthenticationError("Authentication failed: invalid credentials")
        self._cred, self.principal = cred, user
        self._gs2 = text[:len(text) - len(bare)]
        self._client_first_bare = bare
        self._full_nonce = client_nonce + self._nonce()
        self._server_first = f"r={self._full_nonce},s={_b64(cred.salt)},i={cred.iterations}"
        self.state = "SENT_SERVER_FIRST"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationError("client-final without a proof")
        attrs = dict(_attributes(without_proof))
        if attrs.get("c") != _b64(self._gs2.encode()):
            raise SaslAuthenticationError("channel binding data does not match")
        if attrs.get("r") != self._full_nonce:
            raise SaslAuthenticationError("nonce does not match")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        cred = self._cred
        signature = hmac.new(cred.stored_key, auth_message, self._algo).digest()
        proof = _unb64(proof_b64)
        if len(proof) != len(signature):
            raise SaslAuthenticationError("Authentication failed: invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._algo, client_key).digest(), cred.stored_key):
            raise SaslAuthenticationError("Authentication failed: invalid credentials")
        self.state = "COMPLETE"
        verifier = hmac.new(cred.server_key, auth_message, self._algo).digest()
        return f"v={_b64(verifier)}".encode()


def new_server(mechanism: str, lookup: CredentialLookup):
    """A fresh server for `mechanism` (a Kafka mechanism name) or None if not offered."""
    if mechanism == "PLAIN":
        return PlainServer(lookup)
    if mechanism in MECHANISM_NAMES:
        return ScramServer(MECHANISM_NAMES[mechanism], lookup)
    return None


class ScramClient:
    """Client side of SCRAM (RFC 5802 / 7677) as Kafka uses it, without channel binding: the one
    implementation behind inter-node links, our clients and CLI, the Spark connector and tests.
    `mechanism` is a Kafka type code (SCRAM_SHA_256/512) or name ("SCRAM-SHA-256")."""

    def __init__(self, mechanism: int | str, user: str, password: str, nonce: str | None = None):
        if isinstance(mechanism, str):
            mechanism = MECHANISM_NAMES[mechanism]
        self.mechanism, self.user, self.password = mechanism, user, password
        self._algo = _HASH[mechanism]
        self._nonce = nonce or _b64(os.urandom(24))
        self._bare = "n=%s,r=%s" % (user.replace("=", "=3D").replace(",", "=2C"), self._nonce)
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = bytes(server_first).decode()
        try:
            attrs = dict(_attributes(text))
        except SaslAuthenticationError:
            raise SaslAuthenticationError("malformed SCRAM server-first message") from None
        if "e" in attrs:                                  # server-error (RFC 5802 §7)
            raise SaslAuthenticationError(attrs["e"])
        nonce = attrs.get("r", "")
        if "s" not in attrs or "i" not in attrs or not attrs["i"].isdigit():
            raise SaslAuthenticationError("malformed SCRAM server-first message")
        if not nonce.startswith(self._nonce):
            raise SaslAuthenticationError("malformed SCRAM server-first message: the server "
                                          "nonce does not extend ours")
        salt, iterations = _unb64(attrs["s"]), int(attrs["i"])
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self._algo).digest()
        stored = hashlib.new(self._algo, client_key).digest()
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = hmac.new(stored, auth_message, self._algo).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.new(salted, b"Server Key", self._algo).digest()
        self._server_signature = hmac.new(server_key, auth_message, self._algo).digest()
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        """The server proves it knows the credential too (no talking to an impostor)."""
        text = bytes(server_final).decode()
        if text.startswith("e="):
            raise SaslAuthenticationError(text[2:])
        if not text.startswith("v=") or not hmac.compare_digest(_unb64(text[2:]),
                                                                self._server_signature):
            raise SaslAuthenticationError("server signature does not verify")
