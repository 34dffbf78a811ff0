"""SASL options for every Kafka client memstream creates, from one place.

Each client library spells the same four facts differently (aiokafka keyword
arguments, librdkafka dotted keys, a Faust credentials object); building
them here keeps a client from being added that forgets to authenticate. With
no mechanism configured every function returns "nothing to add", so the
unauthenticated embedded default is unchanged.

Only SASL over plaintext is produced: no TLS options exist yet (see the
docs/security.md). With SCRAM the password never crosses the wire;
the data does, in the clear.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import faust

    from services.core.config import Settings

SECURITY_PROTOCOL = "SASL_PLAINTEXT"


def sasl_enabled(settings: Settings) -> bool:
    return settings.kafka_sasl_mechanism is not None


def _credentials(settings: Settings) -> tuple[str, str, str] | None:
    """(mechanism, username, password), or None when SASL is off; Settings guarantees all three together."""
    mechanism, username, password = (
        settings.kafka_sasl_mechanism,
        settings.kafka_sasl_username,
        settings.kafka_sasl_password,
    )
    if mechanism is None or username is None or password is None:
        return None
    return mechanism, username, password.get_secret_value()


def aiokafka_kwargs(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaClient and AIOKafkaAdminClient."""
    found = _credentials(settings)
    if found is None:
        return {}
    mechanism, username, password = found
    return {
        "security_protocol": SECURITY_PROTOCOL,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": username,
        "sasl_plain_password": password,
    }


def confluent_config(settings: Settings) -> dict[str, str]:
    """librdkafka keys for confluent-kafka's Producer, Consumer and AdminClient (merge into their config)."""
    found = _credentials(settings)
    if found is None:
        return {}
    mechanism, username, password = found
    return {
        "security.protocol": SECURITY_PROTOCOL.lower(),
        "sasl.mechanism": mechanism,
        "sasl.username": username,
        "sasl.password": password,
    }


def faust_credentials(settings: Settings) -> faust.SASLCredentials | None:
    """`broker_credentials` of the Faust app: its producer, consumer and admin client all use them."""
    found = _credentials(settings)
    if found is None:
        return None
    import faust

    mechanism, username, password = found
    return faust.SASLCredentials(username=username, password=password, mechanism=mechanism)
