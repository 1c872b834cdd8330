"""Errors the SDK raises: one base class, the broker's Iggy status kept on every reply error."""

from __future__ import annotations

from bayou.protocols.iggy.codes import Status


class BayouClientError(Exception):
    """A request failed. ``status`` is the Iggy status code the broker answered (0 when the failure
    happened on this side, e.g. a closed connection)."""

    retriable = False

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class BrokerConnectionError(BayouClientError):
    """The connection failed or closed; a new ``Client`` (or the next call) reconnects."""

    retriable = True


class UnknownTopicError(BayouClientError):
    pass


class TopicExistsError(BayouClientError):
    pass


class UnknownPartitionError(BayouClientError):
    pass


class OffsetOutOfRangeError(BayouClientError):
    pass


class AuthenticationError(BayouClientError):
    pass


_BY_STATUS: dict[int, type[BayouClientError]] = {
    Status.TOPIC_ID_NOT_FOUND: UnknownTopicError,
    Status.TOPIC_NAME_NOT_FOUND: UnknownTopicError,
    Status.STREAM_ID_NOT_FOUND: UnknownTopicError,
    Status.STREAM_NAME_NOT_FOUND: UnknownTopicError,
    Status.TOPIC_NAME_ALREADY_EXISTS: TopicExistsError,
    Status.PARTITION_NOT_FOUND: UnknownPartitionError,
    Status.INVALID_OFFSET: OffsetOutOfRangeError,
    Status.UNAUTHENTICATED: AuthenticationError,
    Status.INVALID_CREDENTIALS: AuthenticationError,
    Status.UNAUTHORIZED: AuthenticationError,
}


def error_for(status: int, what: str) -> BayouClientError:
    """The SDK error for an Iggy status the broker answered to ``what``."""
    name = Status(status).name if status in Status._value2member_map_ else f"status {status}"
    return _BY_STATUS.get(status, BayouClientError)(f"{what}: {name} ({status})", status)
