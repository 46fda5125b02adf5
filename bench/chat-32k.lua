-- wrk script: POST a ~32 KB chat-completion body.
local filler = string.rep("The quick brown fox jumps over the lazy dog. ", 60)
local messages = { '{"role":"system","content":"You are a helpful assistant."}' }
for i = 1, 12 do
  local role = (i % 2 == 1) and "user" or "assistant"
  messages[#messages + 1] = string.format('{"role":"%s","content":"Turn %d. %s"}', role, i, filler)
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '{"model":"gpt-4o-mini","stream":false,"messages":[' .. table.concat(messages, ",") .. ']}'
