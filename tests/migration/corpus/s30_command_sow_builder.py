"""Commands: a sow built with Command setters (filter, order_by, top_n, batch_size,
query_id) and run with execute; a subscribe with a sub_id through execute_async returns it."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s30")
client.connect(uri)
client.logon()
for n in range(5):
    client.publish("orders", json.dumps({"id": n, "qty": n * 3}))
client.flush()
command = (
    AMPS.Command("sow")
    .set_topic("orders")
    .set_filter("/qty > 2")
    .set_order_by("/qty DESC")
    .set_top_n(3)
    .set_batch_size(2)
    .set_query_id("s30-query")
)
print("ack types", repr(command.get_ack_type()), command.get_sequence())
ids = []
query_ids = set()
for message in client.execute(command):
    if message.get_command() == "sow":
        ids.append(json.loads(message.get_data())["id"])
        query_ids.add(message.get_query_id())
print("ids", ids, "query ids", sorted(query_ids))
sub = AMPS.Command("subscribe").set_topic("orders").set_sub_id("s30-sub").set_filter("/qty > 100")
print("execute_async", client.execute_async(sub, lambda m: None))
client.unsubscribe("s30-sub")
client.close()
