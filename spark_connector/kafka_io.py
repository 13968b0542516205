"""A small blocking Kafka client for Spark's Python workers: plain sockets + our wire codecs.

Why not `clients/`: Spark calls a data source from short synchronous Python functions (in the
driver's planner process and in executor workers); a trio event loop per call buys nothing, and
executors should need nothing but the wire codecs. This module speaks exactly what the connector
needs: ApiVersions, Metadata, ListOffsets, Fetch, Produce (+ SaslHandshake/SaslAuthenticate with
PLAIN or SCRAM-SHA-256/512 when `kafka.security.protocol` asks for SASL), over TCP or TLS.

Connections are cached per Python process (`get_client`), keyed by bootstrap servers and
security settings, so a reused Spark worker keeps its connection to each partition leader.

Errors: every Kafka error surfaces as a `wire.errors.KafkaError` subclass (its `code` is the Kafka
error code); an unreachable broker is `ConnectionClosed`. Retriable errors are retried with a
metadata refresh until `request.timeout.ms` runs out.
"""

from __future__ import annotations

import dataclasses
import socket
import ssl
import threading
import time

from common.sasl import SaslAuthenticationError, ScramClient
from spark_connector.framing import (API_API_VERSIONS, API_FETCH, API_LIST_OFFSETS,
                                     API_METADATA, API_PRODUCE, API_SASL_AUTHENTICATE,
                                     API_SASL_HANDSHAKE, ClientFraming, request_class)
from wire.errors import DecodeError, ErrorCode, KafkaError

# The versions this module knows how to fill in. Fetch stops at 12: v13+ names topics by id.
OUR_VERSIONS = {API_PRODUCE: (3, 11), API_FETCH: (4, 12), API_LIST_OFFSETS: (1, 8),
                API_METADATA: (1, 12), API_SASL_HANDSHAKE: (1, 1), API_SASL_AUTHENTICATE: (0, 2)}

EARLIEST, LATEST = -2, -1          # ListOffsets special timestamps (also Spark's JSON -2 / -1)


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ConnectionClosed(KafkaError):
    """A broker could not be reached, or closed the connection (Kafka's NETWORK_EXCEPTION)."""
    code = ErrorCode.NETWORK_EXCEPTION
    retriable = True
    invalid_metadata = True


def kafka_error(code: int, what: str) -> KafkaError:
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error code {code}"
    return KafkaError.from_code(code, f"{what}: {name}")


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    """The `kafka.*` settings this client understands (Spark passes them with the prefix)."""
    bootstrap_servers: str
    client_id: str = "raftka-spark"
    security_protocol: str = "PLAINTEXT"       # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    sasl_mechanism: str = "PLAIN"              # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True
    request_timeout_ms: int = 30000
    retry_backoff_ms: int = 100

    @staticmethod
    def from_kafka_params(params: dict[str, str]) -> "ClientConfig":
        """`params`: Kafka client property names without the `kafka.` prefix."""
        servers = params.get("bootstrap.servers")
        if not servers:
            raise ValueError("option 'kafka.bootstrap.servers' must be specified")
        protocol = params.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"kafka.security.protocol {protocol!r} is not one of PLAINTEXT, SSL, "
                             "SASL_PLAINTEXT, SASL_SSL")
        mechanism = params.get("sasl.mechanism", "PLAIN").upper()
        user, password = params.get("sasl.username"), params.get("sasl.password")
        jaas = params.get("sasl.jaas.config")
        if jaas and user is None:
            user, password = parse_jaas(jaas)
        if protocol.startswith("SASL"):
            if mechanism not in SASL_MECHANISMS:
                raise ValueError(f"kafka.sasl.mechanism {mechanism!r} is not supported (use one of "
                                 f"{', '.join(SASL_MECHANISMS)})")
            if user is None or password is None:
                raise ValueError("SASL needs kafka.sasl.jaas.config (or kafka.sasl.username and "
                                 "kafka.sasl.password)")
        # Java clients name PEM files ssl.truststore.location when ssl.truststore.type=PEM;
        # librdkafka calls them ssl.ca.location: accept both spellings.
        return ClientConfig(
            bootstrap_servers=servers,
            client_id=params.get("client.id", "raftka-spark"),
            security_protocol=protocol, sasl_mechanism=mechanism,
            sasl_username=user, sasl_password=password,
            ssl_cafile=params.get("ssl.ca.location") or params.get("ssl.truststore.location"),
            ssl_certfile=params.get("ssl.certificate.location")
            or params.get("ssl.keystore.location"),
            ssl_keyfile=params.get("ssl.key.location"),
            ssl_check_hostname=params.get("ssl.endpoint.identification.algorithm", "https") != "",
            request_timeout_ms=int(params.get("request.timeout.ms", 30000)),
            retry_backoff_ms=int(params.get("retry.backoff.ms", 100)))


def parse_jaas(jaas: str) -> tuple[str | None, str | None]:
    """username/password out of a Java `...LoginModule required username="u" password="p";`."""
    out: dict[str, str] = {}
    for key in ("username", "password"):
        at = jaas.find(key + "=")
        if at < 0:
            continue
        rest = jaas[at + len(key) + 1:].lstrip()
        if rest[:1] in ("'", '"'):
            end = rest.find(rest[0], 1)
            out[key] = rest[1:end if end > 0 else None]
        else:
            out[key] = rest.split()[0].rstrip(";")
    return out.get("username"), out.get("password")


def split_host_port(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad bootstrap server {server!r} (want host:port)")
    return host.strip("[]"), int(port)


class BrokerSocket:
    """One blocking connection; requests are sent and answered strictly one at a time."""

    def __init__(self, host: str, port: int, config: ClientConfig):
        self.host, self.port, self.config = host, port, config
        self._framing = ClientFraming()
        self._sock: socket.socket | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}

    def connect(self) -> None:
        timeout = self.config.request_timeout_ms / 1000
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.config.security_protocol in ("SSL", "SASL_SSL"):
                ctx = ssl.create_default_context(cafile=self.config.ssl_cafile)
                ctx.check_hostname = self.config.ssl_check_hostname
                if self.config.ssl_certfile:
                    ctx.load_cert_chain(self.config.ssl_certfile, self.config.ssl_keyfile)
                sock = ctx.wrap_socket(sock, server_hostname=self.host)
        except OSError as exc:
            raise ConnectionClosed(f"cannot reach {self.host}:{self.port}: {exc}") from None
        self._sock = sock
        resp = self.request(request_class(API_API_VERSIONS)(
            client_software_name="raftka-spark", client_software_version="0.1"), 3)
        if resp.error_code:
            raise kafka_error(resp.error_code, "ApiVersions")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        if self.config.security_protocol.startswith("SASL"):
            self._sasl()

    def _sasl(self) -> None:
        mechanism = self.config.sasl_mechanism
        hs = self.request(request_class(API_SASL_HANDSHAKE)(mechanism=mechanism),
                          self.version(API_SASL_HANDSHAKE))
        if hs.error_code:
            raise kafka_error(hs.error_code, f"SASL handshake for {mechanism} (broker offers "
                              f"{hs.mechanisms})")
        user, password = self.config.sasl_username, self.config.sasl_password
        if mechanism == "PLAIN":
            self._sasl_round(b"\0" + user.encode() + b"\0" + password.encode())
            return
        scram = ScramClient(mechanism, user, password)
        try:
            server_first = self._sasl_round(scram.first())
            scram.verify(self._sasl_round(scram.final(server_first)))
        except SaslAuthenticationError as exc:
            raise KafkaError.from_code(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)) from None

    def _sasl_round(self, token: bytes) -> bytes:
        auth = self.request(request_class(API_SASL_AUTHENTICATE)(auth_bytes=token),
                            self.version(API_SASL_AUTHENTICATE))
        if auth.error_code:
            raise kafka_error(auth.error_code, f"SASL authentication ({auth.error_message})")
        return bytes(auth.auth_bytes or b"")

    def version(self, api_key: int) -> int:
        """Highest version both sides speak."""
        lo, hi = OUR_VERSIONS[api_key]
        theirs = self.api_versions.get(api_key)
        if theirs is None or min(hi, theirs[1]) < max(lo, theirs[0]):
            raise KafkaError.from_code(ErrorCode.UNSUPPORTED_VERSION,
                                       f"{self.host}:{self.port} has no version of api {api_key} "
                                       f"in {lo}..{hi} (it offers {theirs})")
        return min(hi, theirs[1])

    def request(self, message, version: int):
        if self._sock is None:
            raise ConnectionClosed(f"{self.host}:{self.port}: not connected")
        framing = self._framing
        data = framing.encode_request(message, version, self.config.client_id)
        try:
            self._sock.sendall(data)
            # the whole answer is read into one buffer sized from its prefix (a Fetch answer is
            # megabytes: no growing buffer, no copy per chunk)
            payload = self._recv_exactly(framing.frame_size(bytes(self._recv_exactly(4))))
            return framing.decode_response(payload)
        except OSError as exc:        # timeouts included: the connection is unusable after one
            self.close()
            raise ConnectionClosed(f"{self.host}:{self.port}: {exc}") from None
        except (ConnectionClosed, DecodeError):
            self.close()
            raise

    def _recv_exactly(self, n: int) -> memoryview:
        buf = memoryview(bytearray(n))
        got = 0
        while got < n:
            k = self._sock.recv_into(buf[got:])
            if not k:
                raise ConnectionClosed(f"{self.host}:{self.port} closed the connection")
            got += k
        return buf

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    @property
    def connected(self) -> bool:
        return self._sock is not None


@dataclasses.dataclass
class PartitionInfo:
    leader: int
    leader_epoch: int
    error_code: int = 0


@dataclasses.dataclass
class FetchResult:
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes
    aborted: list          # [(producer_id, first_offset)] for read_committed


class KafkaClient:
    """Metadata cache + one `BrokerSocket` per broker; thread-safe by one lock (Spark calls us
    from one thread per worker, so the lock is only a guard)."""

    def __init__(self, config: ClientConfig):
        self.config = config
        self._bootstrap = [split_host_port(s) for s in config.bootstrap_servers.split(",") if s]
        if not self._bootstrap:
            raise ValueError("kafka.bootstrap.servers is empty")
        self.brokers: dict[int, tuple[str, int]] = {}
        self.partitions: dict[tuple[str, int], PartitionInfo] = {}
        self._sockets: dict[tuple[str, int], BrokerSocket] = {}
        self._lock = threading.RLock()

    # -- connections -------------------------------------------------------------------------

    def _socket(self, addr: tuple[str, int]) -> BrokerSocket:
        s = self._sockets.get(addr)
        if s is None or not s.connected:
            s = BrokerSocket(addr[0], addr[1], self.config)
            s.connect()
            self._sockets[addr] = s
        return s

    def _any_socket(self) -> BrokerSocket:
        errors = []
        for addr in list(self.brokers.values()) + self._bootstrap:
            try:
                return self._socket(addr)
            except ConnectionClosed as exc:
                errors.append(str(exc))
        raise ConnectionClosed("no broker reachable: " + "; ".join(errors))

    def _leader_socket(self, topic: str, partition: int) -> BrokerSocket:
        info = self.partitions.get((topic, partition))
        if info is None or info.leader < 0 or info.leader not in self.brokers:
            self.refresh_metadata([topic])
            info = self.partitions.get((topic, partition))
        if info is None:
            raise KafkaError.from_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                       f"{topic}-{partition} does not exist")
        if info.error_code and info.leader < 0:
            raise kafka_error(info.error_code, f"{topic}-{partition} has no leader")
        return self._socket(self.brokers[info.leader])

    def close(self) -> None:
        with self._lock:
            for s in self._sockets.values():
                s.close()
            self._sockets.clear()

    def _retrying(self, what: str, fn):
        """Call fn() until it stops raising retriable errors or request.timeout.ms passes."""
        deadline = time.monotonic() + self.config.request_timeout_ms / 1000
        backoff = self.config.retry_backoff_ms / 1000
        while True:
            try:
                with self._lock:
                    return fn()
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() + backoff > deadline:
                    raise
                if exc.invalid_metadata:
                    self.partitions.clear()
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    # -- metadata ----------------------------------------------------------------------------

    def refresh_metadata(self, topics: list[str] | None = None
                         ) -> dict[str, dict[int, PartitionInfo]]:
        """Partitions of `topics` (None: every topic). Unknown topics are simply absent."""
        md = request_class(API_METADATA)
        sock = self._any_socket()
        req = md(topics=None if topics is None else
                 [md.MetadataRequestTopic(name=t) for t in topics],
                 allow_auto_topic_creation=False)
        resp = sock.request(req, sock.version(API_METADATA))
        self.brokers.update({b.node_id: (b.host, b.port) for b in resp.brokers})
        out: dict[str, dict[int, PartitionInfo]] = {}
        for t in resp.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if t.error_code and t.error_code != ErrorCode.LEADER_NOT_AVAILABLE:
                raise kafka_error(t.error_code, f"metadata for topic {t.name}")
            parts = {}
            for p in t.partitions:
                info = PartitionInfo(p.leader_id, p.leader_epoch, p.error_code)
                parts[p.partition_index] = info
                self.partitions[(t.name, p.partition_index)] = info
            out[t.name] = parts
        return out

    def topic_partitions(self, topics: list[str] | None = None) -> dict[str, list[int]]:
        """{topic: sorted partition ids}; internal topics (`__...`) left out when listing all."""
        got = self._retrying("metadata", lambda: self.refresh_metadata(topics))
        return {t: sorted(p) for t, p in got.items()
                if topics is not None or not t.startswith("__")}

    # -- offsets -----------------------------------------------------------------------------

    def list_offsets(self, wanted: dict[tuple[str, int], int],
                     isolation_level: int = 0) -> dict[tuple[str, int], int]:
        """{(topic, partition): timestamp or EARLIEST/LATEST} -> offset (-1: no record at or
        after that timestamp, as Kafka answers)."""
        out: dict[tuple[str, int], int] = {}
        todo = dict(wanted)

        def attempt():
            by_leader: dict[tuple[str, int], list] = {}
            for tp in todo:
                sock = self._leader_socket(*tp)
                by_leader.setdefault((sock.host, sock.port), []).append(tp)
            first_error = None
            for addr, tps in by_leader.items():
                sock = self._socket(addr)
                lo = request_class(API_LIST_OFFSETS)
                topics: dict[str, list] = {}
                for t, p in tps:
                    topics.setdefault(t, []).append(lo.ListOffsetsPartition(
                        partition_index=p, timestamp=todo[(t, p)], current_leader_epoch=-1))
                resp = sock.request(lo(replica_id=-1, isolation_level=isolation_level,
                                       topics=[lo.ListOffsetsTopic(name=t, partitions=ps)
                                               for t, ps in topics.items()]),
                                    sock.version(API_LIST_OFFSETS))
                for t in resp.topics:
                    for p in t.partitions:
                        if p.error_code:
                            first_error = first_error or kafka_error(
                                p.error_code, f"ListOffsets {t.name}-{p.partition_index}")
                            continue
                        out[(t.name, p.partition_index)] = p.offset
                        todo.pop((t.name, p.partition_index), None)
            if first_error is not None:
                raise first_error
            return out

        return self._retrying("list offsets", attempt) if todo else out

    # -- fetch / produce ---------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 4 << 20,
              isolation_level: int = 0, max_wait_ms: int = 200) -> FetchResult:
        """One Fetch of one partition from its leader. OFFSET_OUT_OF_RANGE is returned (the
        caller decides whether that is data loss); other errors are retried or raised."""
        fr = request_class(API_FETCH)

        def attempt():
            sock = self._leader_socket(topic, partition)
            req = fr(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                     isolation_level=isolation_level, session_id=0, session_epoch=-1,
                     topics=[fr.FetchTopic(topic=topic, partitions=[fr.FetchPartition(
                         partition=partition, fetch_offset=offset, current_leader_epoch=-1,
                         log_start_offset=-1, partition_max_bytes=max_bytes)])])
            resp = sock.request(req, sock.version(API_FETCH))
            if resp.error_code:
                raise kafka_error(resp.error_code, "Fetch")
            data = resp.responses[0].partitions[0]
            if data.error_code and data.error_code != ErrorCode.OFFSET_OUT_OF_RANGE:
                raise kafka_error(data.error_code, f"Fetch {topic}-{partition}@{offset}")
            aborted = [(a.producer_id, a.first_offset) for a in (data.aborted_transactions or ())]
            return FetchResult(data.error_code, data.high_watermark, data.last_stable_offset,
                               data.log_start_offset, bytes(data.records or b""), aborted)

        return self._retrying("fetch", attempt)

    def produce(self, batches: dict[tuple[str, int], bytes], acks: int = -1,
                timeout_ms: int = 30000) -> dict[tuple[str, int], int]:
        """Write one record batch per partition; returns each batch's base offset. Retriable
        errors resend only the partitions that failed (at-least-once: a lost answer means a
        duplicate, never a loss)."""
        out: dict[tuple[str, int], int] = {}
        todo = dict(batches)
        pr = request_class(API_PRODUCE)

        def attempt():
            by_leader: dict[tuple[str, int], list] = {}
            for tp in todo:
                sock = self._leader_socket(*tp)
                by_leader.setdefault((sock.host, sock.port), []).append(tp)
            first_error = None
            for addr, tps in by_leader.items():
                sock = self._socket(addr)
                topics: dict[str, list] = {}
                for t, p in tps:
                    topics.setdefault(t, []).append(
                        pr.PartitionProduceData(index=p, records=todo[(t, p)]))
                resp = sock.request(pr(acks=acks, timeout_ms=timeout_ms, topic_data=[
                    pr.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()]),
                    sock.version(API_PRODUCE))
                for t in resp.responses:
                    for p in t.partition_responses:
                        if p.error_code:
                            first_error = first_error or kafka_error(
                                p.error_code, f"Produce {t.name}-{p.index}")
                            continue
                        out[(t.name, p.index)] = p.base_offset
                        todo.pop((t.name, p.index), None)
            if first_error is not None:
                raise first_error
            return out

        return self._retrying("produce", attempt) if todo else out


_CLIENTS: dict[ClientConfig, KafkaClient] = {}
_CLIENTS_LOCK = threading.Lock()


def get_client(config: ClientConfig) -> KafkaClient:
    """The process-wide client for `config`: a reused Spark worker keeps its connections."""
    with _CLIENTS_LOCK:
        c = _CLIENTS.get(config)
        if c is None:
            c = _CLIENTS[config] = KafkaClient(config)
        return c


def close_all() -> None:
    with _CLIENTS_LOCK:
        for c in _CLIENTS.values():
            c.close()
        _CLIENTS.clear()
