"""kafka-python 2.0.2 speaks SaslHandshake v0 followed by raw (unframed) SASL tokens: the legacy
path. Produce with the right password must work; a wrong one must fail. Prints one JSON line."""

import json
import sys

from kafka import KafkaProducer

bootstrap, topic, mechanism, user, password = sys.argv[1:6]


def produce(pw):
    p = KafkaProducer(bootstrap_servers=bootstrap.split(","), security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=pw,
                      request_timeout_ms=5000, max_block_ms=5000, api_version=(2, 0, 0))
    try:
        p.send(topic, b"legacy").get(timeout=10)
    finally:
        p.close(timeout=1)


result = {"ok": False}
try:
    produce(password)
    try:
        produce("wrong-" + password)
        result["error"] = "wrong password accepted"
    except Exception as exc:  # noqa: BLE001
        result = {"ok": True, "wrong": type(exc).__name__}
except Exception as exc:  # noqa: BLE001
    result["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(result))
