"""Handlers: a global handler for every ack, the last-chance handler, an exception listener
that receives what a message handler raised."""

import os
import sys
import threading

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s31")
acks = []
client.set_global_command_type_message_handler("ack", lambda m: acks.append(m.get_ack_type()))
errors = []
got_error = threading.Event()


def listener(exc):
    errors.append(str(exc))
    got_error.set()


client.set_exception_listener(listener)
client.connect(uri)
client.logon()


def failing(message):
    raise ValueError("handler failed on " + message.get_data())


client.subscribe(failing, "s31-topic", timeout=5000)
client.publish("s31-topic", '{"x":1}')
print("listener got it", got_error.wait(5))
print("errors", errors[:1])
client.flush()
print("acks seen", "processed" in acks)
client.close()
