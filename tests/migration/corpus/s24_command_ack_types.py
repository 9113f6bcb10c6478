"""Commands: get_ack_type shows the set string, each add_ack_type appended after a comma;
get_ack_type_enum gives the flags."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

Command = AMPS.Command
print(repr(Command("sow").get_ack_type()))
print(repr(Command("sow").add_ack_type("processed").get_ack_type()))
print(repr(Command("sow").add_ack_type("processed").add_ack_type("completed").get_ack_type()))
print(repr(Command("sow").set_ack_type("stats,persisted").get_ack_type()))
print(repr(Command("sow").set_ack_type("stats").add_ack_type("processed").get_ack_type()))
print(repr(Command("sow").set_ack_type_enum(12).get_ack_type()))
print(Command("sow").set_ack_type("stats,completed").get_ack_type_enum())
print(Command("sow").add_ack_type("processed").add_ack_type("persisted").get_ack_type_enum())
for name in ("None_", "Received", "Parsed", "Processed", "Persisted", "Completed", "Stats"):
    print(
        name,
        getattr(AMPS.Message.AckType, name),
        getattr(AMPS.Message.AckType, name.rstrip("_") + "Enum"),
    )
