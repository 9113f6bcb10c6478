"""Queues with handlers and auto-ack: a handler that raises gives its message back (it comes
again), every message is processed; ack batches with a timeout."""

import json
import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

publisher = AMPS.Client("corpus-s37-pub")
publisher.connect(uri)
publisher.logon()
for n in range(6):
    publisher.publish("jobs", json.dumps({"n": n}))
publisher.publish_flush()
consumer = AMPS.Client("corpus-s37-con")
consumer.connect(uri)
consumer.logon()
consumer.set_auto_ack(True)
consumer.set_ack_batch_size(3)
consumer.set_ack_timeout(100)
print("ack timeout", consumer.get_ack_timeout())
lock = threading.Lock()
seen = []
done = threading.Event()
raised = []


def on_message(message):
    n = json.loads(message.get_data())["n"]
    with lock:
        seen.append(n)
        if len(set(seen)) == 6:
            done.set()
    if n == 3 and not raised:
        raised.append(n)
        raise RuntimeError("fail once")


consumer.set_exception_listener(lambda exc: None)
consumer.subscribe(on_message, "jobs", options="max_backlog=1", timeout=5000)
print("all processed", done.wait(10))
with lock:
    print("seen", seen)
consumer.close()
publisher.close()
