"""Queues with streams: auto-ack with a batch size and max_backlog=1; each message is acked
when the next one is asked for, so all arrive in order and none is delivered twice."""

import json
import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

publisher = AMPS.Client("corpus-s17-pub")
publisher.connect(uri)
publisher.logon()
for n in range(8):
    publisher.publish("jobs", json.dumps({"n": n}))
publisher.publish_flush()

consumer = AMPS.Client("corpus-s17-con")
consumer.connect(uri)
consumer.logon()
consumer.set_auto_ack(True)
consumer.set_ack_batch_size(5)
consumer.set_ack_timeout(60000)
print("auto_ack", consumer.get_auto_ack(), "batch", consumer.get_ack_batch_size())
stream = consumer.execute(AMPS.Command("subscribe").set_topic("jobs").set_options("max_backlog=1"))
got = []
for message in stream.timeout(5000):
    if message is None:
        print("stalled after", got)
        break
    got.append(json.loads(message.get_data())["n"])
    if len(got) == 8:
        break
print("got", got)
stream.close()
consumer.close()
publisher.close()
