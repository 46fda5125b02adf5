"""Drives foldgate with the official `openai` package: a 50-turn
conversation, every other turn streamed. Writes, per request, the messages
the client sent and foldgate's response headers to the JSON file named by
argv[2], for the Rust test to check against what the upstream received.
"""
import json
import sys

import openai

base_url, out_path = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key="sk-e2e", default_headers={"x-conversation-id": "py-e2e"})
filler = "we compare the parser, the tokenizer and the cache layer before deciding on the next step"
messages = [{"role": "system", "content": "You are a careful coding assistant."}]
tag = 0
log = []
for turn in range(50):
    tag += 1
    messages.append({"role": "user", "content": f"[m{tag}] step {turn}: {filler}"})
    sent = [dict(m) for m in messages]
    if turn % 2:
        raw = client.chat.completions.with_raw_response.create(model="tiny-model", messages=messages, max_tokens=100, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    else:
        raw = client.chat.completions.with_raw_response.create(model="tiny-model", messages=messages, max_tokens=100)
        text = raw.parse().choices[0].message.content
    assert text == "Sure, done.", text
    log.append({"sent": sent, "fold": raw.headers.get("x-foldgate-fold"), "tokens_out": int(raw.headers.get("x-foldgate-tokens-out"))})
    tag += 1
    messages.append({"role": "assistant", "content": f"[m{tag}] {text} {filler}"})

with open(out_path, "w") as f:
    json.dump(log, f)
print(f"{len(log)} requests, folds: {sum(1 for r in log if r['fold'] == 'new')}")
