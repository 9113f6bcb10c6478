"""SOW with acks: the stats ack reaches the stream and the handler, whether completed is
asked for too or not; matches counts the records."""

import json
import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s21")
client.connect(uri)
client.logon()
for n in range(4):
    client.publish("orders", json.dumps({"id": n, "qty": n * 10}))
client.flush()
for acks in (["stats"], ["completed", "stats"], ["completed"]):
    command = AMPS.Command("sow").set_topic("orders").set_filter("/qty >= 10")
    for ack in acks:
        command.add_ack_type(ack)
    out = []
    for message in client.execute(command).timeout(5000):
        if message is None:
            out.append("timeout")
            break
        if message.get_command() == "ack":
            out.append(message.get_ack_type())
            if message.get_ack_type() == "stats":
                out.append(f"matches={message.get_matches()}")
        else:
            out.append(message.get_command())
    print("stream", ",".join(acks), out)
    seen = []
    done = threading.Event()

    def on_message(message, seen=seen, done=done, last=acks[-1]):
        if message.get_command() == "ack":
            seen.append(message.get_ack_type())
            if message.get_ack_type() == last:
                done.set()
        else:
            seen.append(message.get_command())

    command = AMPS.Command("sow").set_topic("orders").set_filter("/qty >= 10")
    for ack in acks:
        command.add_ack_type(ack)
    client.execute_async(command, on_message)
    done.wait(5)
    print("handler", ",".join(acks), seen)
client.close()
