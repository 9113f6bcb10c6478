"""SOW options: filters, order_by, top_n, batch_size, and the group_begin/group_end frame of a
query on a keyed SOW topic; a re-publish of a key replaces its record."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s27")
client.connect(uri)
client.logon()
for n in range(6):
    client.publish(
        "orders", json.dumps({"id": n, "qty": (n * 7) % 10, "side": "buy" if n % 2 else "sell"})
    )
client.publish("orders", json.dumps({"id": 0, "qty": 99, "side": "sell"}))  # replaces id 0
client.flush()


def query(**kwargs):
    out = []
    for message in client.sow("orders", timeout=5000, **kwargs):
        command = message.get_command()
        if command == "sow":
            out.append(json.loads(message.get_data())["id"])
        elif command in ("group_begin", "group_end"):
            out.append(command)
    return out


print("all", sorted(x for x in query() if isinstance(x, int)))
print("filter", query(filter="/side = 'buy'", order_by="/id"))
print("order desc", query(order_by="/qty DESC"))
print("top_n", query(order_by="/id", top_n=2))
print("batch 2", query(order_by="/id", batch_size=2))
print("no match", query(filter="/qty > 1000"))
record = [
    json.loads(m.get_data())
    for m in client.sow("orders", "/id = 0", timeout=5000)
    if m.get_command() == "sow"
]
print("replaced", record)
client.close()
