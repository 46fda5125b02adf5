-- wrk script: POST a ~32 KB Anthropic Messages body (the chat body's turns).
local filler = string.rep("The quick brown fox jumps over the lazy dog. ", 60)
local messages = {}
for i = 1, 12 do
  local role = (i % 2 == 1) and "user" or "assistant"
  messages[#messages + 1] = string.format('{"role":"%s","content":[{"type":"text","text":"Turn %d. %s"}]}', role, i, filler)
end
messages[#messages + 1] = '{"role":"user","content":"Go on."}'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-api-key"] = "sk-bench"
wrk.headers["anthropic-version"] = "2023-06-01"
wrk.body = '{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"You are a helpful assistant.","messages":[' .. table.concat(messages, ",") .. ']}'
