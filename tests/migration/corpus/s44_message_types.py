"""Message types: NVFIX and FIX payloads built with the builders and read back with the
shredders, published and received over an nvfix connection; composite payloads."""

import os
import sys

if os.environ.get("AMPS_MODULE") == "AMPS":
    import AMPS
else:
    import ampsclient as AMPS

uri, workdir = sys.argv[1], sys.argv[2]

builder = AMPS.NVFIXBuilder()
builder.append("id", "7")
builder.append("qty", "100")
payload = builder.get_string()
print("nvfix fields", sorted(AMPS.NVFIXShredder().to_map(payload).items()))
fix = AMPS.FIXBuilder()
fix.append(11, "order-1")
fix.append(38, "250")
print("fix fields", sorted(AMPS.FIXShredder().to_map(fix.get_string()).items()))
nvfix_uri = uri.rsplit("/", 1)[0] + "/nvfix"
client = AMPS.Client("corpus-s44")
client.connect(nvfix_uri)
client.logon()
stream = client.subscribe("s44-topic", timeout=5000)
client.publish("s44-topic", payload)
message = next(iter(stream.timeout(5000)))
print("received", sorted(AMPS.NVFIXShredder().to_map(message.get_data()).items()))
stream.close()
client.close()
composite = AMPS.CompositeMessageBuilder()
composite.append('{"part":1}')
composite.append("second part")
parser = AMPS.CompositeMessageParser()
count = parser.parse(composite.get_data())
print("composite parts", count, [parser.get_part(i) for i in range(count)])
