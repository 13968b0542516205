import pytest

from wire.errors import (DecodeError, ErrorCode, KafkaError, NotControllerError,
                         NotLeaderOrFollowerError, error_for_code)

# Spot checks against the numbers in Kafka's protocol guide: a wrong number breaks every client.
KNOWN = {
    "UNKNOWN_SERVER_ERROR": -1, "NONE": 0, "OFFSET_OUT_OF_RANGE": 1, "CORRUPT_MESSAGE": 2,
    "UNKNOWN_TOPIC_OR_PARTITION": 3, "NOT_LEADER_OR_FOLLOWER": 6, "REQUEST_TIMED_OUT": 7,
    "MESSAGE_TOO_LARGE": 10, "NOT_COORDINATOR": 16, "INVALID_TOPIC_EXCEPTION": 17,
    "NOT_ENOUGH_REPLICAS": 19, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20, "ILLEGAL_GENERATION": 22,
    "UNKNOWN_MEMBER_ID": 25, "REBALANCE_IN_PROGRESS": 27, "TOPIC_AUTHORIZATION_FAILED": 29,
    "UNSUPPORTED_VERSION": 35, "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37,
    "INVALID_REPLICATION_FACTOR": 38, "INVALID_CONFIG": 40, "NOT_CONTROLLER": 41,
    "INVALID_REQUEST": 42, "OUT_OF_ORDER_SEQUENCE_NUMBER": 45, "INVALID_PRODUCER_EPOCH": 47,
    "KAFKA_STORAGE_ERROR": 56, "SASL_AUTHENTICATION_FAILED": 58, "UNKNOWN_PRODUCER_ID": 59,
    "MEMBER_ID_REQUIRED": 79, "FENCED_INSTANCE_ID": 82, "FENCED_LEADER_EPOCH": 74,
    "UNKNOWN_LEADER_EPOCH": 75, "STALE_BROKER_EPOCH": 77, "INVALID_RECORD": 87,
    "PRODUCER_FENCED": 90, "INVALID_UPDATE_VERSION": 95, "UNKNOWN_TOPIC_ID": 100,
    "DUPLICATE_BROKER_REGISTRATION": 101, "BROKER_ID_NOT_REGISTERED": 102,
    "INELIGIBLE_REPLICA": 107, "NEW_LEADER_ELECTED": 108, "FENCED_MEMBER_EPOCH": 110,
    "STALE_MEMBER_EPOCH": 113, "TRANSACTION_ABORTABLE": 120,
}


@pytest.mark.parametrize("name,code", sorted(KNOWN.items()))
def test_numbers(name, code):
    assert ErrorCode[name] == code


def test_codes_are_contiguous_from_minus_one():
    assert sorted(int(c) for c in ErrorCode) == list(range(-1, len(ErrorCode) - 1))


def test_flags():
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER.retriable and ErrorCode.NOT_LEADER_OR_FOLLOWER.invalid_metadata
    assert ErrorCode.NOT_ENOUGH_REPLICAS.retriable and not ErrorCode.NOT_ENOUGH_REPLICAS.invalid_metadata
    assert not ErrorCode.TOPIC_ALREADY_EXISTS.retriable
    assert ErrorCode.NOT_CONTROLLER.retriable


def test_exceptions_round_trip():
    for code in ErrorCode:
        exc = KafkaError.from_code(code)
        assert exc.code == code
        assert exc.retriable == code.retriable
        assert isinstance(exc, code.exception)
    assert error_for_code(6) is NotLeaderOrFollowerError
    assert NotControllerError().retriable
    unknown = KafkaError.from_code(4242, "odd")
    assert unknown.code == 4242 and str(unknown) == "odd" and type(unknown) is KafkaError


def test_decode_error_is_a_value_error():
    assert issubclass(DecodeError, ValueError)


NEWER = {"TRANSACTIONAL_ID_NOT_FOUND": 105, "FETCH_SESSION_TOPIC_ID_ERROR": 106,
         "OFFSET_MOVED_TO_TIERED_STORAGE": 109, "UNRELEASED_INSTANCE_ID": 111,
         "UNSUPPORTED_ASSIGNOR": 112, "MISMATCHED_ENDPOINT_TYPE": 114,
         "UNKNOWN_CONTROLLER_ID": 116, "TELEMETRY_TOO_LARGE": 118, "INVALID_REGISTRATION": 119,
         "INVALID_RECORD_STATE": 121, "SHARE_SESSION_NOT_FOUND": 122, "FENCED_STATE_EPOCH": 124,
         "INVALID_VOTER_KEY": 125, "DUPLICATE_VOTER": 126, "VOTER_NOT_FOUND": 127,
         "INVALID_REGULAR_EXPRESSION": 128, "REBOOTSTRAP_REQUIRED": 129,
         "STREAMS_INVALID_TOPOLOGY": 130, "SHARE_SESSION_LIMIT_REACHED": 133}


@pytest.mark.parametrize("name,code", sorted(NEWER.items()))
def test_newer_numbers(name, code):
    assert ErrorCode[name] == code and ErrorCode(code).name == name


# Java's InvalidMetadataException subclasses (all retriable: the client refreshes metadata and
# retries) and plain RetriableException subclasses, per Kafka's clients/.../common/errors.
INVALID_METADATA = {3, 5, 6, 9, 13, 56, 72, 74, 80, 83, 84, 100, 103}
RETRIABLE_ONLY = {2, 7, 14, 15, 16, 19, 20, 41, 51, 70, 71, 75, 78, 88, 89, 106, 122, 123, 133}


def test_flag_families_match_kafka():
    for code in ErrorCode:
        assert code.invalid_metadata == (code in INVALID_METADATA), code.name
        assert code.retriable == (code in INVALID_METADATA | RETRIABLE_ONLY), code.name


def test_exception_classes_and_messages():
    exc = ErrorCode.NOT_ENOUGH_REPLICAS.exception()
    assert isinstance(exc, KafkaError) and exc.code == 19 and exc.retriable
    assert "in-sync replicas" in str(exc) and exc.error_code is ErrorCode.NOT_ENOUGH_REPLICAS
    assert str(KafkaError.from_code(ErrorCode.NOT_CONTROLLER, "try node 2")) == "try node 2"
    assert error_for_code(-1).__name__ == "UnknownServerErrorError"
    assert error_for_code(4242) is KafkaError and KafkaError(code=4242).error_code == 4242
    assert len({code.exception for code in ErrorCode}) == len(ErrorCode)
    assert all(issubclass(code.exception, KafkaError) for code in ErrorCode)
    assert ErrorCode.NONE.message == "" and ErrorCode.REQUEST_TIMED_OUT.message
