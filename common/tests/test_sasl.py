"""SASL mechanisms: RFC 7677 test vector for SCRAM-SHA-256, SHA-512 round trips, PLAIN, and
every malformed or wrong step ends in SaslAuthenticationError (never anything else)."""

import base64

import pytest
from hypothesis import given, settings, strategies as st

from common import sasl
from common.sasl import (SCRAM_SHA_256, SCRAM_SHA_512, PlainServer,
                         SaslAuthenticationError, ScramClient, ScramServer,
                         make_credential)

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def store(**users):
    """{user: password} → lookup over SCRAM credentials of both mechanisms."""
    creds = {(u, m): make_credential(m, p, 4096) for u, p in users.items()
             for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
    return lambda user, mech: creds.get((user, mech))


def test_rfc7677_scram_sha256_vector():
    cred = make_credential(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    server = ScramServer(SCRAM_SHA_256, lambda u, m: cred if u == "user" else None,
                         nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == "user"


def test_rfc7677_client_side_matches():
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                         b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final.endswith(b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_round_trip_and_wrong_password(mech):
    lookup = store(alice="s3cret")
    server = ScramServer(mech, lookup)
    client = ScramClient(mech, "alice", "s3cret")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.complete and server.principal == "alice"

    server = ScramServer(mech, lookup)
    client = ScramClient(mech, "alice", "wrong")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(client.final(server.evaluate(client.first())))
    assert not server.complete
    with pytest.raises(SaslAuthenticationError):        # a failed exchange stays failed
        server.evaluate(b"anything")


def test_scram_escaped_username():
    creds = {("we,ird=name", SCRAM_SHA_512): make_credential(SCRAM_SHA_512, "pw")}
    server = ScramServer(SCRAM_SHA_512, lambda u, m: creds.get((u, m)))
    client = ScramClient(SCRAM_SHA_512, "we,ird=name", "pw")
    assert b"n=we=2Cird=3Dname" in client.first()
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.principal == "we,ird=name"


def test_scram_refusals():
    lookup = store(alice="pw")
    cases = [b"", b"p=tls-unique,,n=alice,r=x", b"n,,r=x,n=alice", b"n,,n=bob,r=abc",
             b"n,,m=ext,n=alice,r=x", b"n,,n=al=ZZice,r=x", b"\xff\xfe", b"n,a=mallory,n=alice,r=x"]
    for token in cases:
        with pytest.raises(SaslAuthenticationError):
            ScramServer(SCRAM_SHA_256, lookup).evaluate(token)
    # a client-final whose nonce or channel binding was tampered with
    for mangle in (lambda f: f.replace(b"c=biws", b"c=eSws"), lambda f: f.replace(b"r=", b"r=X"),
                   lambda f: f.split(b",p=")[0], lambda f: f + b"==="):
        server = ScramServer(SCRAM_SHA_256, lookup)
        client = ScramClient(SCRAM_SHA_256, "alice", "pw")
        final = client.final(server.evaluate(client.first()))
        with pytest.raises(SaslAuthenticationError):
            server.evaluate(mangle(final))


def test_plain():
    lookup = store(alice="s3cret")
    ok = PlainServer(lookup)
    assert ok.evaluate(b"\x00alice\x00s3cret") == b"" and ok.complete and ok.principal == "alice"
    assert PlainServer(lookup).evaluate(b"alice\x00alice\x00s3cret") == b""
    for token in (b"\x00alice\x00wrong", b"\x00bob\x00s3cret", b"\x00alice", b"x\x00alice\x00s3cret",
                  b"\x00\x00", b"\x00alice\x00s3cret\x00", b"\xff\x00alice\x00s3cret"):
        server = PlainServer(lookup)
        with pytest.raises(SaslAuthenticationError):
            server.evaluate(token)
        assert not server.complete and server.principal is None


def test_new_server_names():
    lookup = store()
    assert isinstance(sasl.new_server("PLAIN", lookup), PlainServer)
    assert sasl.new_server("SCRAM-SHA-512", lookup).mechanism == SCRAM_SHA_512
    assert sasl.new_server("GSSAPI", lookup) is None


@settings(max_examples=200, deadline=None)
@given(first=st.binary(max_size=200), second=st.binary(max_size=200))
def test_random_tokens_only_raise_authentication_errors(first, second):
    lookup = store(alice="pw")
    for server in (ScramServer(SCRAM_SHA_512, lookup), PlainServer(lookup)):
        try:
            server.evaluate(first)
            server.evaluate(second)
        except SaslAuthenticationError:
            pass
        assert not server.complete


def test_scram_client_by_name_rfc_7677_and_server_errors():
    """The client the Spark connector and our clients share: mechanism by Kafka name, the RFC
    7677 vector, and the server's errors (a bad signature, e=..., a malformed server-first)."""
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = c.final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(SaslAuthenticationError, match="signature"):
        c.verify(b"v=AAAA")
    with pytest.raises(SaslAuthenticationError, match="unknown-user"):
        c.verify(b"e=unknown-user")
    with pytest.raises(SaslAuthenticationError, match="malformed"):
        ScramClient("SCRAM-SHA-512", "u", "p", nonce="abc").final(b"r=zzz,s=AA==,i=1")
    with pytest.raises(SaslAuthenticationError, match="other-error"):
        ScramClient("SCRAM-SHA-512", "u", "p", nonce="abc").final(b"e=other-error")
