"""Message.Options: the option strings official scripts build, used on a sow_and_subscribe."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

Options = AMPS.Message.Options
for name in ("OOF", "Replace", "Pause", "Resume", "Live", "SendKeys", "NoEmpties", "FullyDurable"):
    value = getattr(Options, name, None)
    print(name, repr(value))
print("top_n", repr(Options.TopN(3)), "max_backlog", repr(Options.MaxBacklog(5)))
print("conflation", repr(Options.Conflation("1s")))
client = AMPS.Client("corpus-s34")
client.connect(uri)
client.logon()
for n in range(4):
    client.publish("orders", json.dumps({"id": n}))
client.flush()
stream = client.sow_and_subscribe("orders", options=Options.OOF, order_by="/id", timeout=5000)
ids = []
for message in stream:
    if message.get_command() == "sow":
        ids.append(json.loads(message.get_data())["id"])
    elif message.get_command() == "group_end":
        break
stream.close()
print("sow part", ids)
client.close()
