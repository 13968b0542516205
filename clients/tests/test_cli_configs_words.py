"""`raftka configs` names its entity the way kafka-configs.sh does; the brokers' cluster-wide
default (resource name "") used to print as "broker ." after `--entity-default`."""

from clients.cli.configs import _entity_words
from clients.admin import ConfigResource, ConfigResourceType


def test_entity_words():
    assert _entity_words(ConfigResource(ConfigResourceType.TOPIC, "t")) == "topic t"
    assert _entity_words(ConfigResource(ConfigResourceType.BROKER, "1")) == "broker 1"
    assert _entity_words(ConfigResource(ConfigResourceType.BROKER, "")) == \
        "brokers in the cluster (default)"
