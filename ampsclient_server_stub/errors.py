"""The one exception tree of the reference server.

Every error the server's library code raises on purpose is a :class:`ServerError`::

    ServerError
    ├── ConfigError (ValueError)               config.py          a bad configuration
    │   ├── SecurityConfigError                security/auth.py   bad module name, missing file...
    │   └── QueueStartError                    queues/engine.py   a queue that cannot run
    ├── RequestError                           carries .reason    a client's command is refused
    │   ├── CommandFailure                     engine/wire.py     the general refusal
    │   ├── ReplayError                        engine/txlog.py    a bookmark replay cannot start
    │   ├── ConflationError                    engine/conflation.py
    │   ├── HistoryError                       engine/sow_history.py a historical sow refused
    │   └── HttpError                          admin/http.py      an admin HTTP request refused
    ├── OptionError (ValueError)               an option or expression that does not parse
    │   ├── FilterError                        engine/filter_syntax.py reason "bad filter"
    │   ├── TopicError                         engine/topics.py   reason "bad regex topic"
    │   ├── RegexError                         regexes.py         a regex that cannot run safely
    │   ├── SelectError                        engine/payload.py
    │   ├── OrderByError                       engine/payload.py
    │   ├── EnrichmentError                    engine/enrichment.py a stage <Field>
    │   └── FieldError                         views/fields.py    a view's <Field> or grouping
    ├── PayloadError (ValueError)              a payload that is not a document of its type
    │   ├── FixFormatError                     engine/fix_codec.py
    │   ├── XmlFormatError                     engine/xml_codec.py
    │   ├── BsonFormatError                    engine/bson_codec.py
    │   └── CompositeFormatError               engine/composite_codec.py
    ├── StorageError                           the transaction log and its files
    │   ├── JournalError                       engine/journal_types.py
    │   │   ├── JournalClosedError (ValueError)
    │   │   ├── JournalInUseError (OSError)
    │   │   └── SequenceOrderError (ValueError)
    │   └── CorruptJournalError (ValueError)   engine/journal_format.py
    ├── SecurityError                          users and password files
    │   ├── UsersFileError (ValueError)        security/users.py
    │   └── PasswordHashError (ValueError)     security/passwords.py
    ├── ReplicationError
    │   ├── ReplicatedStoreError               replication/inbound.py a record not journaled
    │   └── AdminError (RuntimeError)          replication/admin.py
    └── NotFound (LookupError)                 admin/tree.py      no statistics node at a path

The builtin bases in parentheses are kept as mixins, so code that catches ``ValueError``,
``OSError`` or ``RuntimeError`` still catches what it did before the tree existed. The
families live here; each leaf lives with the code that raises it. This module imports nothing
from the server, so every layer may import it.
"""

from __future__ import annotations

__all__ = [
    "OptionError",
    "PayloadError",
    "ReplicationError",
    "RequestError",
    "SecurityError",
    "ServerError",
    "StorageError",
]


class ServerError(Exception):
    """The root of every error the reference server raises on purpose."""


class RequestError(ServerError):
    """A client's command that the server refuses.

    Attributes:
        reason: the exact AMPS reason string sent back in the failure ack.
    """

    reason: str


class OptionError(ServerError, ValueError):
    """An option or expression of a command (filter, topic, ``select``, ``order_by``) that
    does not parse."""


class PayloadError(ServerError, ValueError):
    """A message payload (or a document to write as one) that is not valid for its message
    type."""


class StorageError(ServerError):
    """The transaction log or one of its files cannot be used."""


class SecurityError(ServerError):
    """A users file or password hash that cannot be used."""


class ReplicationError(ServerError):
    """A replication peer or its admin interface failed."""
