"""Error handling: the class names of what the client raises, as scripts log them."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s26")
try:
    client.publish("t", "{}")
except AMPS.AMPSException as exc:
    print("not connected", type(exc).__name__, isinstance(exc, AMPS.ConnectionException))
client.connect(uri)
client.logon()
for label, call in (
    ("bad filter", lambda: client.subscribe(lambda m: None, "t", "((((", timeout=5000)),
    ("bad sow filter", lambda: client.sow(lambda m: None, "orders", "/x = ", timeout=5000)),
    ("bad regex topic", lambda: client.subscribe(lambda m: None, "(((", timeout=5000)),
):
    try:
        call()
        print(label, "no error")
    except AMPS.CommandException as exc:
        print(
            label,
            type(exc).__name__,
            exc.__class__.__mro__[1].__name__ in ("BadFilter", "BadRegexTopic", "CommandException"),
        )
try:
    client.publish_flush(1000, AMPS.Message.AckType.StatsEnum)
except AMPS.AMPSException as exc:
    print("flush with stats", type(exc).__name__)
client.close()
for name in (
    "BadFilterException",
    "DisconnectedException",
    "TimedOutException",
    "UsageException",
    "CommandException",
    "ConnectionException",
):
    print(name, getattr(AMPS, name).__name__)
