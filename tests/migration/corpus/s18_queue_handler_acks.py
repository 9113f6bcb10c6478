"""Queues with handlers: manual message.ack(), a cancelled message comes back, the lease
period is on each delivery."""

import json
import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

publisher = AMPS.Client("corpus-s18-pub")
publisher.connect(uri)
publisher.logon()
for n in range(4):
    publisher.publish("jobs", json.dumps({"n": n}))
publisher.publish_flush()

consumer = AMPS.Client("corpus-s18-con")
consumer.connect(uri)
consumer.logon()
lock = threading.Lock()
seen = []
done = threading.Event()


def on_message(message):
    n = json.loads(message.get_data())["n"]
    with lock:
        seen.append(n)
        first_time = seen.count(n) == 1
        leased = bool(message.get_lease_period())
    if n == 2 and first_time:
        message.ack("cancel")  # given back: delivered again
    else:
        message.ack()
    if len(seen) == 5:
        done.set()
    return leased


consumer.subscribe(on_message, "jobs", options="max_backlog=1", timeout=5000)
print("all delivered", done.wait(10))
print("seen", seen)
consumer.close()
publisher.close()
