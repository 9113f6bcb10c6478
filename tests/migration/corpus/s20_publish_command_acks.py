"""Commands and acks: a publish through execute() with processed/persisted acks; the stream
gets the processed ack and ends (a publish's persisted ack names the sequence, not the
command), and ends at once when only persisted is asked for."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

client = AMPS.Client("corpus-s20")
client.connect(uri)
client.logon()
for acks in (["persisted"], ["processed"], ["processed", "persisted"]):
    command = AMPS.Command("publish").set_topic("s20-topic").set_data('{"a":1}')
    for ack in acks:
        command.add_ack_type(ack)
    items = []
    for message in client.execute(command).timeout(5000):
        if message is None:
            items.append("timeout")
            break
        items.append((message.get_command(), message.get_ack_type(), message.get_status()))
    print(",".join(acks), items)
client.close()
