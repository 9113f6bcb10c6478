"""Return values: publish and delta_publish return 0 on a plain client, publish_flush takes
Message.AckType enums, logon returns a command id, flush/unsubscribe return None, a handler
subscription returns its id, sow_delete returns its stats ack."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s23")
client.connect(uri)
print("logon returns str", isinstance(client.logon(), str))
print("publish", client.publish("orders", json.dumps({"id": 1})))
print("delta_publish", client.delta_publish("orders", json.dumps({"id": 1, "x": 2})))
print("flush", client.flush())
print("publish_flush", client.publish_flush())
print("publish_flush persisted", client.publish_flush(5000, AMPS.Message.AckType.PersistedEnum))
print("publish_flush processed", client.publish_flush(5000, AMPS.Message.AckType.ProcessedEnum))
try:
    client.publish_flush(5000, AMPS.Message.AckType.StatsEnum)
except AMPS.CommandException as exc:
    print("publish_flush stats", type(exc).__name__, exc)
sub_id = client.subscribe(lambda m: None, "s23-topic", sub_id="s23-sub")
print("subscribe returns", sub_id)
print("unsubscribe", client.unsubscribe("s23-sub"))
ack = client.sow_delete("orders", "/id = 1")
print("sow_delete", type(ack).__name__, ack.get_ack_type(), ack.get_matches())
print(
    "execute_async returns str",
    isinstance(client.execute_async(AMPS.Command("sow").set_topic("orders"), lambda m: None), str),
)
print("disconnect", client.disconnect())
print("close", client.close())
