"""Asks foldgate about a fact only its archive holds, with the official
`openai` (chat completions and Responses) and `anthropic` packages, whole
and streamed (through the SDKs'
own stream accumulators, which check event order and indices). foldgate's
upstream is a scripted model that calls `foldgate_recall` when it cannot
see the fact. Writes what each client got to the JSON file named by
argv[2].
"""
import json
import sys

import anthropic
import openai

base_url, out_path = sys.argv[1], sys.argv[2]
filler = "we look at the parser, the tokenizer and the cache layer, then decide on the next step together"
fact = "note that the favourite colour of the customer is teal"
turns = [("user", f"[m1] {fact}: {filler}"), ("assistant", f"[m2] noted: {filler}")]
for i in range(54):
    turns.append(("user", f"[m{2 * i + 3}] question {i}: {filler}"))
    turns.append(("assistant", f"[m{2 * i + 4}] answer {i}: {filler}"))
turns.append(("user", "what is the favourite colour of the customer?"))
system = "You are a careful coding assistant."
log = []

oai = openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-e2e",
                    default_headers={"x-conversation-id": "recall-openai"})
messages = [{"role": "system", "content": system}] + [{"role": r, "content": c} for r, c in turns]
whole = oai.chat.completions.create(model="tiny-model", messages=messages)
log.append({"client": "openai", "text": whole.choices[0].message.content,
            "tool_calls": whole.choices[0].message.tool_calls,
            "finish": whole.choices[0].finish_reason, "input": whole.usage.prompt_tokens,
            "output": whole.usage.completion_tokens})
with oai.chat.completions.stream(model="tiny-model", messages=messages,
                                 stream_options={"include_usage": True}) as stream:
    final = stream.get_final_completion()
log.append({"client": "openai-stream", "text": final.choices[0].message.content,
            "tool_calls": final.choices[0].message.tool_calls,
            "finish": final.choices[0].finish_reason, "input": final.usage.prompt_tokens,
            "output": final.usage.completion_tokens})

items = [{"role": r, "content": c} for r, c in turns]
whole = oai.responses.create(model="tiny-model", instructions=system, input=items, store=False)
with oai.responses.stream(model="tiny-model", instructions=system, input=items, store=False) as stream:
    final = stream.get_final_response()
for name, response in [("responses", whole), ("responses-stream", final)]:
    log.append({"client": name, "text": response.output_text,
                "tool_calls": [i.name for i in response.output if i.type == "function_call"] or None,
                "finish": response.status, "input": response.usage.input_tokens,
                "output": response.usage.output_tokens})

ant = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-e2e",
                          default_headers={"x-conversation-id": "recall-anthropic"})
messages = [{"role": r, "content": [{"type": "text", "text": c}]} for r, c in turns]
whole = ant.messages.create(model="tiny-model", max_tokens=100, system=system, messages=messages)
with ant.messages.stream(model="tiny-model", max_tokens=100, system=system, messages=messages) as stream:
    final = stream.get_final_message()
for name, message in [("anthropic", whole), ("anthropic-stream", final)]:
    log.append({"client": name, "text": "".join(b.text for b in message.content if b.type == "text"),
                "tool_calls": [b.name for b in message.content if b.type == "tool_use"] or None,
                "finish": message.stop_reason, "input": message.usage.input_tokens,
                "output": message.usage.output_tokens})

with open(out_path, "w") as f:
    json.dump(log, f)
print(json.dumps(log, indent=1))
