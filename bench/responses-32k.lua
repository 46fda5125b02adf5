-- wrk script: POST a ~32 KB OpenAI Responses body (the chat body's turns).
local filler = string.rep("The quick brown fox jumps over the lazy dog. ", 60)
local items = {}
for i = 1, 12 do
  local role = (i % 2 == 1) and "user" or "assistant"
  items[#items + 1] = string.format('{"role":"%s","content":"Turn %d. %s"}', role, i, filler)
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '{"model":"gpt-4o-mini","instructions":"You are a helpful assistant.","store":false,"input":[' .. table.concat(items, ",") .. ']}'
