"""SOW queries: filters, batches, top_n, order_by, sow_and_subscribe with OOF, sow_delete stats."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]
TOPIC = "/ADMIN/bookmark_store"
client = AMPS.Client("corpus-s08")
client.connect(uri)
client.logon()
for i, name in enumerate(["a", "b", "c", "d", "e"]):
    client.publish(TOPIC, json.dumps({"clientName": "s08", "subId": name, "bookmark": str(i)}))
client.flush(5000)


def records(stream):
    out = []
    for message in stream:
        if message.get_command() == "sow":
            out.append(json.loads(message.get_data())["subId"])
    return out


print("all", sorted(records(client.sow(TOPIC, "/clientName = 's08'", batch_size=2, timeout=5000))))
print(
    "filtered",
    records(client.sow(TOPIC, "/subId IN ('b', 'd')", order_by="/subId DESC", timeout=5000)),
)
print("top_n", len(records(client.sow(TOPIC, "/clientName = 's08'", top_n=2, timeout=5000))))

events = []
stream = client.sow_and_subscribe(
    TOPIC, "/clientName = 's08' AND /bookmark < '3'", oof_enabled=True, timeout=5000
)
for message in stream:
    command = message.get_command()
    if command == "sow":
        events.append(("sow", json.loads(message.get_data())["subId"]))
    elif command == "group_end":
        client.publish(TOPIC, json.dumps({"clientName": "s08", "subId": "a", "bookmark": "9"}))
    elif command == "oof":
        events.append(("oof", message.get_sow_key() != ""))
        break
stream.close()
print("sow_and_subscribe", sorted(events))
ack = client.sow_delete(TOPIC, "/clientName = 's08'")
print("deleted", ack.get_matches(), ack.get_status())
client.close()
