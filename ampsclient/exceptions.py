"""The one exception tree of ampsclient.

Every error raised by the library is an :class:`AMPSError`; each class defined anywhere in
the package is drawn here, under the class it derives from (``tests/test_exception_trees.py``
checks the drawing against the code)::

    AMPSError                                  (alias AMPSException)
    ├── AMPSConnectionError                    (alias ConnectionException)
    │   ├── DisconnectedError                  (alias DisconnectedException)
    │   ├── ConnectionRefusedError_            (alias ConnectionRefusedException)
    │   ├── AuthenticationError                (alias AuthenticationException) reason "auth failure"
    │   ├── NameInUseError                     (alias NameInUseException) reason "name in use"
    │   ├── NotEntitledError                   (alias NotEntitledException) reason "not entitled"
    │   ├── InvalidURIError                    (alias InvalidUriException)
    │   ├── MessageTypeError                   (alias MessageTypeException) a type the URI names
    │   ├── TransportError                     (alias TransportException)
    │   │   └── NotAmpsPortError               an HTTP answer on tcp:// (a ws or admin port)
    │   ├── RetryOperationError                (alias RetryOperationException)
    │   └── RetryLimitError                    ha/reconnect.py: the delay strategy gave up
    ├── TimeoutError                           (alias TimedOutException; also builtins.TimeoutError)
    ├── ProtocolError                          (alias StreamException) bytes that break the protocol
    │   ├── LocalProtocolError (ValueError)    we were asked to send what AMPS cannot carry
    │   └── RemoteProtocolError                the peer sent bytes that are not AMPS
    │       ├── FrameTooLargeError             a length prefix over max_frame_size
    │       ├── MalformedFrameError            a header or framing that does not parse
    │       └── CompressionError               a compression=zlib stream that does not inflate
    ├── CommandError                           (alias CommandException) carries .reason
    │   ├── BadFilterError                     (alias BadFilterException) reason "bad filter"
    │   ├── BadRegexTopicError                 (alias BadRegexTopicException) "bad regex topic"
    │   ├── BadSowKeyError                     (alias BadSowKeyException) reason "bad sow key"
    │   ├── InvalidBookmarkError               (alias InvalidBookmarkException)
    │   ├── InvalidOptionsError                (alias InvalidOptionsException)
    │   ├── InvalidOrderByError                (alias InvalidOrderByException)
    │   ├── InvalidSubIdError                  (alias InvalidSubIdException) "invalid subId"
    │   ├── InvalidTopicError                  (alias InvalidTopicException)
    │   ├── LogonRequiredError                 (alias LogonRequiredException)
    │   ├── SubidInUseError                    (alias SubidInUseException) "subid in use"
    │   ├── SubscriptionAlreadyExistsError     (alias SubscriptionAlreadyExistsException)
    │   ├── ReplayFailedError                  (alias ReplayFailedException) bookmark_not_found=fail
    │   ├── DuplicateLogonError                (alias DuplicateLogonException)
    │   ├── MissingFieldsError                 (alias MissingFieldsException)
    │   ├── PublishError                       (alias PublishException) "sow store failed"...
    │   └── UnknownError                       (alias UnknownException)
    ├── StoreError                             (alias StoreException)
    │   ├── PublishStoreGapError               (alias PublishStoreGapException)
    │   ├── CorruptStoreError                  a store file damaged beyond repair
    │   └── ForeignSequenceError               another publisher used the client name
    ├── UsageError                             (alias UsageException) a call the library refuses
    │   ├── InvalidStateError (AssertionError) core/state.py: a transition the table forbids
    │   ├── HAPhaseError (AssertionError)      core/ha_sequence.py: an HA step out of order
    │   ├── TracingUnavailableError            tracing.py: OpenTelemetry is not installed
    │   ├── BadInputError (ValueError)         cli/formats.py: input not in the format given
    │   └── SparkSyntaxError (ValueError)      cli/spark_syntax.py: a spark line we cannot run
    ├── AMPSSparkError                         spark/_core.py: a Spark read or write failed
    │   ├── AMPSDataLossError                  spark/_core.py: a read's start left the log
    │   └── AMPSUnavailableError               spark/_core.py: no server within the timeout
    ├── _Irregular                             protocol/columns.py: private, caught where raised
    ├── _Irregular                             spark/_arrow.py: private, caught where raised
    └── _Redo                                  spark/_jsonfields.py: private, caught where raised

The two private ``_Irregular`` signals ("this payload is not in the shape the fast path
handles, take the general one") and ``_Redo`` ("this row is left to the row path") never leave
their module.

**Local or remote** (as h11's ``LocalProtocolError``/``RemoteProtocolError``): a
:class:`RemoteProtocolError` means the peer sent bytes that are not AMPS (the framers, the
header decoder, the inflater raise it on received bytes; the connection cannot go on); a
:class:`LocalProtocolError` means the application asked to send something the protocol
cannot carry (a topic, filter, option or payload ``str`` that is not encodable as UTF-8, such
as one holding a lone surrogate), refused before anything is queued, the connection intact.
Both are a :class:`ProtocolError`, the official client's ``StreamException``.

The names ending in ``Exception`` are the official AMPS Python client's names, so that a script
written for it runs after ``import ampsclient as AMPS``; where a class has one, it is also the
class's own ``__name__`` (``type(exc).__name__`` reads ``BadFilterException`` as with the
official client, see :data:`OFFICIAL_NAMES`), and the ``...Error`` name is an alias.
"""

from __future__ import annotations

import builtins
from typing import Any

__all__ = [
    "OFFICIAL_NAMES",
    "AMPSConnectionError",
    "AMPSError",
    "AMPSException",
    "AlreadyConnected",
    "AlreadyConnectedException",
    "AuthenticationError",
    "AuthenticationException",
    "BadFilter",
    "BadFilterError",
    "BadFilterException",
    "BadRegexTopic",
    "BadRegexTopicError",
    "BadRegexTopicException",
    "BadSowKeyError",
    "BadSowKeyException",
    "ClientNameInUse",
    "CommandError",
    "CommandException",
    "CommandTimedOut",
    "CommandTypeError",
    "CompressionError",
    "ConnectionException",
    "ConnectionRefused",
    "ConnectionRefusedError_",
    "ConnectionRefusedException",
    "CorruptStoreError",
    "CorruptedRecord",
    "Disconnected",
    "DisconnectedError",
    "DisconnectedException",
    "DuplicateLogonError",
    "DuplicateLogonException",
    "ForeignSequenceError",
    "FrameTooLargeError",
    "InvalidBookmarkError",
    "InvalidBookmarkException",
    "InvalidMessageTypeOptions",
    "InvalidOptionsError",
    "InvalidOptionsException",
    "InvalidOrderByError",
    "InvalidOrderByException",
    "InvalidSubIdError",
    "InvalidSubIdException",
    "InvalidTopicError",
    "InvalidTopicException",
    "InvalidTransportOptions",
    "InvalidTransportOptionsException",
    "InvalidURIError",
    "InvalidUriException",
    "InvalidUriFormat",
    "LocalProtocolError",
    "LocalStorageError",
    "LogonRequiredError",
    "LogonRequiredException",
    "MalformedFrameError",
    "MessageTypeError",
    "MessageTypeException",
    "MessageTypeNotFound",
    "MissingFieldsError",
    "MissingFieldsException",
    "NameInUseError",
    "NameInUseException",
    "NotAmpsPortError",
    "NotEntitledError",
    "NotEntitledException",
    "ProtocolError",
    "PublishError",
    "PublishException",
    "PublishStoreGapError",
    "PublishStoreGapException",
    "RemoteProtocolError",
    "ReplayFailedError",
    "ReplayFailedException",
    "RetryOperation",
    "RetryOperationError",
    "RetryOperationException",
    "StoreError",
    "StoreException",
    "StreamError",
    "StreamException",
    "SubidInUseError",
    "SubidInUseException",
    "SubscriptionAlreadyExists",
    "SubscriptionAlreadyExistsError",
    "SubscriptionAlreadyExistsException",
    "TimedOut",
    "TimedOutException",
    "TimeoutError",
    "TransportError",
    "TransportException",
    "TransportNotFound",
    "TransportTypeException",
    "UnknownError",
    "UnknownException",
    "UsageError",
    "UsageException",
    "error_for_reason",
]


class AMPSError(Exception):
    """Base class of every error raised by ampsclient."""


class AMPSConnectionError(AMPSError):
    """The connection could not be made, was refused, or was lost."""


class DisconnectedError(AMPSConnectionError):
    """The peer or the network closed the connection (not the application)."""


class ConnectionRefusedError_(AMPSConnectionError):
    """The server refused the connection."""


class AuthenticationError(AMPSConnectionError):
    """The server rejected the credentials (reason ``auth failure``)."""


class NameInUseError(AMPSConnectionError):
    """Another connection is logged on with this client name (reason ``name in use``)."""


class NotEntitledError(AMPSConnectionError):
    """The user may not do this (reason ``not entitled``)."""


class InvalidURIError(AMPSConnectionError):
    """The connection URI cannot be understood."""


class TransportError(AMPSConnectionError):
    """A transport-level failure other than a plain disconnect."""


class NotAmpsPortError(TransportError):
    """The address answered, but not as an AMPS ``tcp://`` transport: it sent an HTTP response
    (a WebSocket transport, use ``ws://``; or an admin/HTTP port). Retrying cannot help."""


class RetryOperationError(AMPSConnectionError):
    """The operation was interrupted by a reconnect and may be retried."""


class TimeoutError(AMPSError, builtins.TimeoutError):
    """A wait for an ack, a flush or a connection ran out of time."""


class ProtocolError(AMPSError):
    """Bytes on the wire that do not follow the AMPS protocol: what the peer sent
    (:class:`RemoteProtocolError`) or what we were asked to send (:class:`LocalProtocolError`)."""


class LocalProtocolError(ProtocolError, ValueError):
    """The application asked to send something the AMPS protocol cannot carry (a header value
    or payload ``str`` not encodable as UTF-8). Nothing was queued; the connection is intact.
    Also a ``ValueError`` (the ``UnicodeEncodeError`` it replaces was one)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not AMPS: the connection cannot be read any further."""


class FrameTooLargeError(RemoteProtocolError):
    """A frame is larger than the configured maximum frame size."""


class MalformedFrameError(RemoteProtocolError):
    """A frame or header that cannot be parsed."""


class CompressionError(RemoteProtocolError):
    """Bytes of a ``compression=zlib`` connection that are not a valid deflate stream."""


class CommandError(AMPSError):
    """The server answered a command with ``status: failure``.

    Attributes:
        reason: the exact AMPS reason string (``""`` when the server gave none).
    """

    def __init__(self, message: str = "", *, reason: str = "", ack: Any = None) -> None:
        super().__init__(message or reason)
        self.reason = reason
        """The exact reason string the server sent."""
        self.ack = ack
        """The failure ack message, when there was one."""


class BadFilterError(CommandError):
    """Reason ``bad filter``."""


class BadRegexTopicError(CommandError):
    """Reason ``bad regex topic``."""


class BadSowKeyError(CommandError):
    """Reason ``bad sow key``."""


class InvalidBookmarkError(CommandError):
    """Reason ``invalid bookmark`` (also raised locally for a malformed bookmark)."""


class InvalidOptionsError(CommandError):
    """Reason ``invalid options``."""


class InvalidOrderByError(CommandError):
    """Reason ``invalid order by``."""


class InvalidSubIdError(CommandError):
    """Reason ``invalid subId``."""


class InvalidTopicError(CommandError):
    """Reason ``invalid topic`` or ``invalid topic or filter``."""


class LogonRequiredError(CommandError):
    """Reason ``logon required``."""


class SubidInUseError(CommandError):
    """Reason ``subid in use``."""


class DuplicateLogonError(CommandError):
    """A second logon on one connection."""


class MissingFieldsError(CommandError):
    """A command lacks a field the server needs."""


class PublishError(CommandError):
    """Reasons ``sow store failed`` and ``tx store failure``."""


class UnknownError(CommandError):
    """A failure the client cannot classify."""


class StoreError(AMPSError):
    """A publish, bookmark or recovery-point store failed."""


class PublishStoreGapError(StoreError):
    """A publish store found a gap in its sequence numbers."""


class CorruptStoreError(StoreError):
    """A store file is damaged beyond what recovery can repair."""


class ForeignSequenceError(StoreError):
    """The logon ack's last sequence for this client name is one this publish store never
    issued, while it holds unpersisted messages: another publisher used the name (or its
    sequences), and those messages would be taken as duplicates and lost. The HA client
    fails loudly with this rather than report them persisted."""


class UsageError(AMPSError):
    """The library was called in a way it does not support."""


class SubscriptionAlreadyExistsError(CommandError):
    """Reason ``subscription already exists``."""


class ReplayFailedError(CommandError):
    """A bookmark replay the server could not start (``bookmark_not_found=fail``)."""


class MessageTypeError(AMPSConnectionError):
    """The URI names a message type the client cannot handle."""


# The official client's names, so that ``import ampsclient as AMPS`` works for existing scripts.
AMPSException = AMPSError
ConnectionException = AMPSConnectionError
DisconnectedException = DisconnectedError
ConnectionRefusedException = ConnectionRefusedError_
AuthenticationException = AuthenticationError
NameInUseException = NameInUseError
NotEntitledException = NotEntitledError
InvalidUriException = InvalidURIError
TransportException = TransportError
RetryOperationException = RetryOperationError
AlreadyConnectedException = UsageError
TimedOutException = TimeoutError
CommandException = CommandError
BadFilterException = BadFilterError
BadRegexTopicException = BadRegexTopicError
BadSowKeyException = BadSowKeyError
InvalidBookmarkException = InvalidBookmarkError
InvalidOptionsException = InvalidOptionsError
InvalidOrderByException = InvalidOrderByError
InvalidSubIdException = InvalidSubIdError
InvalidTopicException = InvalidTopicError
LogonRequiredException = LogonRequiredError
SubidInUseException = SubidInUseError
DuplicateLogonException = DuplicateLogonError
MissingFieldsException = MissingFieldsError
PublishException = PublishError
UnknownException = UnknownError
StoreException = StoreError
PublishStoreGapException = PublishStoreGapError
UsageException = UsageError
SubscriptionAlreadyExistsException = SubscriptionAlreadyExistsError
ReplayFailedException = ReplayFailedError
MessageTypeException = MessageTypeError
# the official client's older (3.2-era) names of the same classes
AlreadyConnected = UsageError
BadFilter = BadFilterError
BadRegexTopic = BadRegexTopicError
ClientNameInUse = NameInUseError
CommandTimedOut = TimeoutError
CommandTypeError = UsageError
ConnectionRefused = ConnectionRefusedError_
CorruptedRecord = CorruptStoreError
Disconnected = DisconnectedError
InvalidMessageTypeOptions = MessageTypeError
InvalidTransportOptions = InvalidURIError
InvalidTransportOptionsException = InvalidURIError
InvalidUriFormat = InvalidURIError
LocalStorageError = StoreError
MessageTypeNotFound = MessageTypeError
RetryOperation = RetryOperationError
StreamError = ProtocolError
StreamException = ProtocolError
SubscriptionAlreadyExists = SubscriptionAlreadyExistsError
TimedOut = TimeoutError
TransportNotFound = InvalidURIError
TransportTypeException = InvalidURIError
# official name; not in __all__ (it would shadow the builtin on a star import)
ConnectionError = AMPSConnectionError

OFFICIAL_NAMES: dict[type[AMPSError], str] = {
    AMPSError: "AMPSException",
    AMPSConnectionError: "ConnectionException",
    DisconnectedError: "DisconnectedException",
    ConnectionRefusedError_: "ConnectionRefusedException",
    AuthenticationError: "AuthenticationException",
    NameInUseError: "NameInUseException",
    NotEntitledError: "NotEntitledException",
    InvalidURIError: "InvalidUriException",
    TransportError: "TransportException",
    RetryOperationError: "RetryOperationException",
    TimeoutError: "TimedOutException",
    ProtocolError: "StreamException",
    CommandError: "CommandException",
    BadFilterError: "BadFilterException",
    BadRegexTopicError: "BadRegexTopicException",
    BadSowKeyError: "BadSowKeyException",
    InvalidBookmarkError: "InvalidBookmarkException",
    InvalidOptionsError: "InvalidOptionsException",
    InvalidOrderByError: "InvalidOrderByException",
    InvalidSubIdError: "InvalidSubIdException",
    InvalidTopicError: "InvalidTopicException",
    LogonRequiredError: "LogonRequiredException",
    SubidInUseError: "SubidInUseException",
    DuplicateLogonError: "DuplicateLogonException",
    MissingFieldsError: "MissingFieldsException",
    PublishError: "PublishException",
    UnknownError: "UnknownException",
    StoreError: "StoreException",
    PublishStoreGapError: "PublishStoreGapException",
    UsageError: "UsageException",
    SubscriptionAlreadyExistsError: "SubscriptionAlreadyExistsException",
    ReplayFailedError: "ReplayFailedException",
    MessageTypeError: "MessageTypeException",
}
"""Each class that has an official name gets it as its own ``__name__`` (what
``type(exc).__name__``, tracebacks and ``repr`` show, as with the official client); the
Pythonic name stays an alias of the same class. (Classes without an official counterpart,
such as :class:`FrameTooLargeError` or :class:`CorruptStoreError`, keep theirs.)"""
for _cls, _name in OFFICIAL_NAMES.items():
    _cls.__name__ = _cls.__qualname__ = _name
del _cls, _name


_REASONS: dict[str, type[AMPSError]] = {
    "auth failure": AuthenticationError,
    "authentication failure": AuthenticationError,
    "bad filter": BadFilterError,
    "bad regex topic": BadRegexTopicError,
    "bad sow key": BadSowKeyError,
    "invalid bookmark": InvalidBookmarkError,
    "invalid options": InvalidOptionsError,
    "invalid order by": InvalidOrderByError,
    "invalid orderby": InvalidOrderByError,
    "invalid subId": InvalidSubIdError,
    "invalid sub_id": InvalidSubIdError,
    "invalid topic": InvalidTopicError,
    "invalid topic or filter": InvalidTopicError,
    "logon required": LogonRequiredError,
    "name in use": NameInUseError,
    "not entitled": NotEntitledError,
    "subid in use": SubidInUseError,
    "subscription already exists": SubscriptionAlreadyExistsError,
    "sow store failed": PublishError,
    "tx store failure": PublishError,
}


REASON_DETAIL = "reason_detail"
"""The failure-ack field in which the reference server says what exactly is wrong (a bad
filter's offset, a regex topic's error) beside the exact AMPS ``reason``; AMPS itself sends
only ``reason``. Its text, when present, ends the exception's message."""


def _detail(ack: Any) -> str | None:
    header = getattr(ack, "header", None)
    detail = header.get(REASON_DETAIL) if isinstance(header, dict) else None
    return detail if isinstance(detail, str) and detail else None


def error_for_reason(reason: str | None, *, ack: Any = None) -> AMPSError:
    """Build the exception that matches an AMPS failure reason string.

    Args:
        reason: the ``reason`` header of a failure ack (``None`` when absent).
        ack: the ack message, attached to command errors for inspection.

    Returns:
        An instance of the most specific class in the tree; unknown reasons give a
        :class:`CommandError` with the official client's wording. A known reason's message
        ends with the ack's :data:`REASON_DETAIL` when the server sent one (``bad filter:
        unexpected end of filter (at offset 5)``); ``reason`` stays the exact string.
    """
    text = reason if reason is not None else "null"
    cls = _REASONS.get(text)
    if cls is None:
        return CommandError(
            f"Error from server while processing this command: '{text}'", reason=text, ack=ack
        )
    if issubclass(cls, CommandError):
        detail = _detail(ack)
        return cls(text if detail is None else f"{text}: {detail}", reason=text, ack=ack)
    exc = cls(text)
    exc.reason = text  # type: ignore[attr-defined]
    return exc
