"""SCRAM credentials end to end without sockets: the controller's AlterUserScramCredentials
handler stores only salted keys, brokers describe them from the image without secrets, and the
broker's SASL servers authenticate against exactly what was stored."""

import os

import trio

from metadata_quorum import controller_handlers as ch
from metadata_quorum.controller.quorum_controller import QuorumController
from metadata_quorum.records import decode_record, encode_record
from partition_server.handlers.security import handle_describe_user_scram_credentials
from common.sasl import (SCRAM_SHA_256, SCRAM_SHA_512, PlainServer,
                         SaslAuthenticationError, ScramClient, ScramServer,
                         salted_password)
from wire.connection import Request
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS


class FakeService:
    """Just enough of ControllerService: commands commit and replay at once."""

    def __init__(self):
        self.controller = QuorumController()
        self.offset = 0
        self.active = True

    async def mutate(self, command):
        records, result = command(0)
        for rec in records:
            # through the wire encoding, as the metadata log does
            self.controller.replay(self.offset, decode_record(encode_record(rec)))
            self.offset += 1
        return result


def request(api_key, body, version=0):
    return Request(api_key, version, 1, "test", None, body, 0)


def upsert(user, mechanism, password, iterations=4096):
    cls = REQUESTS[ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
    salt = os.urandom(16)
    return cls.ScramCredentialUpsertion(name=user, mechanism=mechanism, iterations=iterations,
                                        salt=salt, salted_password=salted_password(
                                            mechanism, password, salt, iterations))


def alter(svc, deletions=(), upsertions=()):
    cls = REQUESTS[ApiKey.ALTER_USER_SCRAM_CREDENTIALS]
    body = cls(deletions=[cls.ScramCredentialDeletion(name=u, mechanism=m) for u, m in deletions],
               upsertions=list(upsertions))
    resp = trio.run(ch.handle_alter_user_scram_credentials, svc, request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body))
    return {r.user: r.error_code for r in resp.results}


def login(image, mechanism, user, password) -> bool:
    lookup = lambda u, m: image.scram.get((u, m))
    server, client = ScramServer(mechanism, lookup), ScramClient(mechanism, user, password)
    try:
        client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    except SaslAuthenticationError:
        return False
    return server.complete


def test_alter_describe_and_authenticate():
    svc = FakeService()
    assert alter(svc, upsertions=[upsert("alice", SCRAM_SHA_512, "s3cret")]) == {"alice": 0}
    assert alter(svc, upsertions=[upsert("alice", SCRAM_SHA_256, "s3cret")]) == {"alice": 0}
    image = svc.controller.image
    # nothing stored is the password or the salted password
    for rec in image.to_records():
        assert b"s3cret" not in encode_record(rec)
    assert login(image, SCRAM_SHA_512, "alice", "s3cret")
    assert login(image, SCRAM_SHA_256, "alice", "s3cret")
    assert not login(image, SCRAM_SHA_512, "alice", "wrong")
    plain = PlainServer(lambda u, m: image.scram.get((u, m)))
    assert plain.evaluate(b"\0alice\0s3cret") == b"" and plain.complete

    class Broker:
        pass
    broker = Broker()
    broker.image = image
    cls = REQUESTS[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS]
    resp = trio.run(handle_describe_user_scram_credentials, broker, request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, cls(users=None)))
    assert [(r.user, sorted((c.mechanism, c.iterations) for c in r.credential_infos))
            for r in resp.results] == [("alice", [(1, 4096), (2, 4096)])]
    resp = trio.run(handle_describe_user_scram_credentials, broker, request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, cls(
        users=[cls.UserName(name="nobody"), cls.UserName(name="alice"), cls.UserName(name="alice")])))
    assert {r.user: r.error_code for r in resp.results} == {"nobody": 91, "alice": 92}


def test_replace_and_delete_take_effect():
    svc = FakeService()
    alter(svc, upsertions=[upsert("bob", SCRAM_SHA_512, "old")])
    alter(svc, upsertions=[upsert("bob", SCRAM_SHA_512, "new")])
    assert not login(svc.controller.image, SCRAM_SHA_512, "bob", "old")
    assert login(svc.controller.image, SCRAM_SHA_512, "bob", "new")
    assert alter(svc, deletions=[("bob", SCRAM_SHA_512)]) == {"bob": 0}
    assert not login(svc.controller.image, SCRAM_SHA_512, "bob", "new")
    assert alter(svc, deletions=[("bob", SCRAM_SHA_512)]) == {"bob": 91}      # RESOURCE_NOT_FOUND
    # refused upserts change nothing: too few iterations (UNACCEPTABLE_CREDENTIAL), a user
    # named twice in one request (DUPLICATE_RESOURCE)
    assert alter(svc, upsertions=[upsert("carol", SCRAM_SHA_512, "pw", iterations=100)]) == {"carol": 93}
    assert alter(svc, upsertions=[upsert("carol", SCRAM_SHA_512, "pw"),
                                  upsert("carol", SCRAM_SHA_256, "pw")]) == {"carol": 92}
    assert ("carol", SCRAM_SHA_512) not in svc.controller.image.scram
