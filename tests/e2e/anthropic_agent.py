"""Drives foldgate with the official `anthropic` package: a 40-step agent
loop (tool_use, then tool_result), every other step streamed. Writes, per
request, the messages the client sent and foldgate's response headers to
the JSON file named by argv[2], for the Rust test to check against what the
upstream received.
"""
import json
import sys

import anthropic

base_url, out_path = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-e2e",
                             default_headers={"x-conversation-id": "claude-e2e"})
system = [{"type": "text", "text": "You are a careful coding agent. Use the bash tool.", "cache_control": {"type": "ephemeral"}}]
tools = [{"name": "bash", "description": "Run a shell command",
          "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
filler = " we compare the parser, the tokenizer and the cache layer before deciding on the next step;"
messages = [{"role": "user", "content": "[m1] task: make every build step pass"}]
tag = 1
log = []


def streamed(raw):
    """The content blocks of a streamed answer, assembled from its events."""
    blocks, partial = [], {}
    for event in raw.parse():
        if event.type == "content_block_start":
            blocks.append(event.content_block.model_dump(exclude_none=True))
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            blocks[event.index]["text"] += event.delta.text
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text)
    return blocks


for step in range(40):
    sent = json.loads(json.dumps(messages))
    kwargs = dict(model="tiny-claude", max_tokens=200, system=system, tools=tools, messages=messages)
    if step % 2:
        raw = client.messages.with_raw_response.create(stream=True, **kwargs)
        blocks = streamed(raw)
    else:
        raw = client.messages.with_raw_response.create(**kwargs)
        blocks = [b.model_dump(exclude_none=True) for b in raw.parse().content]
    calls = [b for b in blocks if b["type"] == "tool_use"]
    assert len(calls) == 1 and calls[0]["input"]["cmd"].startswith("make step-"), blocks
    log.append({"sent": sent, "fold": raw.headers.get("x-foldgate-fold"),
                "tokens_out": int(raw.headers.get("x-foldgate-tokens-out"))})
    messages.append({"role": "assistant", "content": blocks})
    tag += 1
    output = f"[m{tag}] step {step} output:" + filler * 6
    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0]["id"], "content": output}]})

with open(out_path, "w") as f:
    json.dump(log, f)
print(f"{len(log)} requests, folds: {sum(1 for r in log if r['fold'] != 'none')}")
