"""Drives foldgate with the official `openai` package's `AzureOpenAI`
client on its defaults (endpoint, key and API version, as Azure's own
quick start sets them): a 30-turn conversation on one deployment, every
other turn streamed. Writes, per request, the messages sent and foldgate's
response headers to the JSON file named by argv[2].
"""
import json
import sys

from openai import AzureOpenAI

base_url, out_path = sys.argv[1], sys.argv[2]
client = AzureOpenAI(
    azure_endpoint=base_url,
    api_key="azure-user-key",
    api_version="2024-10-21",
    default_headers={"x-conversation-id": "azure-e2e"},
)
filler = " we compared the parser, the tokenizer and the cache layer once more before the next step;" * 4
messages = [{"role": "system", "content": "You are a careful assistant."}]
log = []
for turn in range(30):
    messages.append({"role": "user", "content": f"[m{2 * turn + 1}] question {turn}:{filler}"})
    sent = list(messages)
    if turn % 2:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-prod", messages=messages, stream=True, max_tokens=50)
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    else:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-prod", messages=messages, max_tokens=50)
        text = raw.parse().choices[0].message.content
    log.append({"sent": sent, "headers": dict(raw.headers), "text": text})
    messages.append({"role": "assistant", "content": f"[m{2 * turn + 2}] {text}"})
with open(out_path, "w") as f:
    json.dump(log, f)
