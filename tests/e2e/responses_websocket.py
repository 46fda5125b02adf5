"""Drives foldgate's Responses WebSocket with the `websockets` client, the
way Codex does: one socket on /v1/responses, a warm-up frame
(`generate: false`), then a 30-step agent loop of `response.create` frames
(reasoning + function_call, then function_call_output) that mostly send
only the new items with `previous_response_id`, every fifth step the whole
input instead. Then two frames sent back to back, answered in order.
Writes to the JSON file named by argv[2]: how long the upgrade took, and per
step the whole input the client means (what it would POST over HTTP).
"""
import json
import sys
import time

from websockets.sync.client import connect

base_url, out_path = sys.argv[1], sys.argv[2]
url = base_url.replace("http://", "ws://", 1) + "/responses"
tools = [{"type": "function", "name": "bash", "description": "Run a shell command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
filler = " we compare the parser, the tokenizer and the cache layer before deciding on the next step;"
request = dict(model="tiny-model", instructions="You are a careful coding agent.", tools=tools,
               tool_choice="auto", parallel_tool_calls=False, store=False, stream=True, include=[])


def answer(ws):
    """The events of one answer, up to the one that ends it."""
    events = []
    while True:
        event = json.loads(ws.recv(timeout=60))
        events.append(event)
        if event["type"] in ("response.completed", "response.failed", "error"):
            return events


started = time.monotonic()
ws = connect(url, additional_headers={"Authorization": "Bearer sk-ws-e2e"}, open_timeout=10,
             max_size=None)
upgrade_ms = (time.monotonic() - started) * 1000

items = [{"role": "user", "content": "[m1] task: make every build step pass"}]
ws.send(json.dumps({"type": "response.create", **request, "input": items, "generate": False}))
warmup = answer(ws)
assert [e["type"] for e in warmup] == ["response.created", "response.completed"], warmup
last_id = warmup[-1]["response"]["id"]
known = len(items)  # the items the socket's last answer covers (its input and output)

tag = 1
log = []
for step in range(30):
    whole = step % 5 == 4
    frame = {"type": "response.create", **request}
    if whole:
        frame["input"] = items
    else:
        frame["previous_response_id"] = last_id
        frame["input"] = items[known:]
    ws.send(json.dumps(frame))
    events = answer(ws)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    output = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    calls = [o for o in output if o["type"] == "function_call"]
    assert len(calls) == 1 and output[0]["type"] == "reasoning", output
    log.append({"sent": json.loads(json.dumps(items)), "incremental": not whole,
                "frame_items": len(frame["input"]), "events": kinds})
    last_id = events[-1]["response"]["id"]
    items.extend(output)
    known = len(items)
    tag += 1
    items.append({"type": "function_call_output", "call_id": calls[0]["call_id"],
                  "output": f"[m{tag}] step {step} output:" + filler * 6})

# Two frames back to back: each answered whole, in the order sent.
for n in (1, 2):
    ws.send(json.dumps({"type": "response.create", **request,
                        "input": [{"role": "user", "content": f"[m{900 + n}] side question {n}"}]}))
first, second = answer(ws), answer(ws)
ws.close()

with open(out_path, "w") as f:
    json.dump({"upgrade_ms": upgrade_ms, "steps": log,
               "back_to_back": [first[-1]["response"]["id"], second[-1]["response"]["id"]]}, f)
print(f"{len(log)} steps over one socket, upgrade in {upgrade_ms:.1f} ms")
