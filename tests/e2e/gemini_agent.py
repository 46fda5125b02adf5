"""Drives foldgate with the official `google-genai` package: a 40-step agent
loop (functionCall, then functionResponse), every other step streamed
(`streamGenerateContent?alt=sse`). Writes, per request, the contents the
client sent and foldgate's response headers to the JSON file named by
argv[2], for the Rust test to check against what the upstream received.
"""
import json
import sys

from google import genai
from google.genai import types

base_url, out_path = sys.argv[1], sys.argv[2]
client = genai.Client(
    api_key="g-e2e",
    http_options=types.HttpOptions(
        base_url=base_url,
        headers={"x-conversation-id": "gemini-e2e"},
    ),
)
run = types.FunctionDeclaration(
    name="run", description="Run a shell command",
    parameters=types.Schema(type="OBJECT", properties={"cmd": types.Schema(type="STRING")}),
)
config = types.GenerateContentConfig(
    system_instruction="You are a careful coding agent. Use the run tool.",
    tools=[types.Tool(function_declarations=[run])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    max_output_tokens=200,
)
filler = " we compare the parser, the tokenizer and the cache layer before deciding on the next step;"
contents = [types.Content(role="user", parts=[types.Part(text="[m1] task: make every build step pass")])]
tag = 1
log = []


def headers_of(response):
    """foldgate's response headers, as the SDK keeps them."""
    return dict(response.sdk_http_response.headers or {})


for step in range(40):
    sent = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in contents]
    if step % 2:
        parts, headers = [], None
        for chunk in client.models.generate_content_stream(model="tiny-gemini", contents=contents, config=config):
            headers = headers or headers_of(chunk)
            if chunk.candidates and chunk.candidates[0].content and chunk.candidates[0].content.parts:
                parts.extend(chunk.candidates[0].content.parts)
        answer = types.Content(role="model", parts=parts)
    else:
        response = client.models.generate_content(model="tiny-gemini", contents=contents, config=config)
        headers = headers_of(response)
        answer = response.candidates[0].content
    calls = [p.function_call for p in answer.parts if p.function_call]
    assert len(calls) == 1 and calls[0].name == "run", answer
    log.append({"sent": sent, "fold": headers.get("x-foldgate-fold"),
                "tokens_out": int(headers.get("x-foldgate-tokens-out"))})
    contents.append(answer)
    tag += 1
    output = f"[m{tag}] step {step} output:" + filler * 6
    contents.append(types.Content(role="user", parts=[
        types.Part.from_function_response(name="run", response={"output": output})]))

with open(out_path, "w") as f:
    json.dump(log, f)
print(f"{len(log)} requests, folds: {sum(1 for r in log if r['fold'] != 'none')}")
