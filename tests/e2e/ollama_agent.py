"""Drives foldgate with the official `ollama` package on its defaults (only
the host pointed at foldgate and a conversation header): a 40-step agent
loop on Ollama's native /api/chat (a `run` tool call, then its `tool`
result), every other step streamed, `options.num_ctx` setting the window;
then a question only an archived tool output answers, asked streamed and
not, which the model answers through foldgate's recall tool. Writes, per
request, the body the client sent and foldgate's response headers (read by
httpx event hooks, which change nothing), and the answers, to the JSON file
named by argv[2], for the Rust test to check against what the upstream
received.
"""
import json
import sys

from ollama import Client

host, out_path = sys.argv[1], sys.argv[2]
exchanges = []


def on_request(request):
    exchanges.append({"sent": json.loads(request.content)})


def on_response(response):
    exchanges[-1]["headers"] = dict(response.headers)


client = Client(
    host=host,
    headers={"x-conversation-id": "ollama-e2e"},
    event_hooks={"request": [on_request], "response": [on_response]},
)
tools = [{
    "type": "function",
    "function": {
        "name": "run",
        "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    },
}]
options = {"num_ctx": 3000, "temperature": 0}
filler = " we compare the parser, the tokenizer and the cache layer before deciding on the next step;"
messages = [
    {"role": "system", "content": "You are a careful coding agent. Use the run tool."},
    {"role": "user", "content": "[m1] task: make every build step pass", "images": ["iVBORw0KGgo="]},
]
tag = 1


def ask(stream):
    """One request; the assistant's text and calls."""
    kwargs = dict(model="tiny-llama", messages=messages, tools=tools, options=options, keep_alive="5m")
    if not stream:
        message = client.chat(**kwargs).message
        return message.content or "", list(message.tool_calls or [])
    content, calls = "", []
    for part in client.chat(stream=True, **kwargs):
        content += part.message.content or ""
        calls.extend(part.message.tool_calls or [])
    return content, calls


for step in range(40):
    content, calls = ask(step % 2 == 1)
    assert len(calls) == 1 and calls[0].function.name == "run", (content, calls)
    messages.append({"role": "assistant", "content": content,
                     "tool_calls": [{"function": {"name": "run", "arguments": dict(calls[0].function.arguments)}}]})
    tag += 1
    output = f"[m{tag}] step {step} output:" + filler * 6
    if step == 3:
        output += " The customer's favourite colour is teal."
    messages.append({"role": "tool", "content": output, "tool_name": "run"})

tag += 1
messages.append({"role": "user", "content": f"[m{tag}] what is the customer's favourite colour?"})
answers = []
for stream in (True, False):
    content, calls = ask(stream)
    assert not calls, calls
    answers.append(content)

with open(out_path, "w") as f:
    json.dump({"exchanges": exchanges, "answers": answers}, f)
folds = sum(1 for e in exchanges if e["headers"].get("x-foldgate-fold") != "none")
print(f"{len(exchanges)} requests, folds: {folds}, answers: {answers}")
