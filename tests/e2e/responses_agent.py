"""Drives foldgate with the official `openai` package's Responses API: a
40-step agent loop (reasoning + function_call, then function_call_output),
every other step streamed. Writes, per request, the input items the client
sent and foldgate's response headers to the JSON file named by argv[2].
"""
import json
import sys

import openai

base_url, out_path = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key="sk-e2e",
                       default_headers={"x-conversation-id": "codex-e2e"})
tools = [{"type": "function", "name": "bash", "description": "Run a shell command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
filler = " we compare the parser, the tokenizer and the cache layer before deciding on the next step;"
items = [{"role": "user", "content": "[m1] task: make every build step pass"}]
tag = 1
log = []


def keep(item):
    """An output item as the client sends it back as input."""
    if item["type"] == "reasoning":
        return {"type": "reasoning", "id": item["id"], "summary": item["summary"]}
    return {"type": "function_call", "call_id": item["call_id"], "name": item["name"], "arguments": item["arguments"]}


for step in range(40):
    sent = json.loads(json.dumps(items))
    kwargs = dict(model="tiny-model", instructions="You are a careful coding agent.", input=items,
                  tools=tools, max_output_tokens=200)
    if step % 2:
        raw = client.responses.with_raw_response.create(stream=True, **kwargs)
        output = [e.item.model_dump(exclude_none=True) for e in raw.parse() if e.type == "response.output_item.done"]
    else:
        raw = client.responses.with_raw_response.create(**kwargs)
        output = [o.model_dump(exclude_none=True) for o in raw.parse().output]
    calls = [o for o in output if o["type"] == "function_call"]
    assert len(calls) == 1 and output[0]["type"] == "reasoning", output
    log.append({"sent": sent, "fold": raw.headers.get("x-foldgate-fold"),
                "tokens_out": int(raw.headers.get("x-foldgate-tokens-out"))})
    items.extend(keep(o) for o in output)
    tag += 1
    items.append({"type": "function_call_output", "call_id": calls[0]["call_id"],
                  "output": f"[m{tag}] step {step} output:" + filler * 6})

with open(out_path, "w") as f:
    json.dump(log, f)
print(f"{len(log)} requests, folds: {sum(1 for r in log if r['fold'] != 'none')}")
