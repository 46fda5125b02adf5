-- wrk script: POST a ~32 KB Gemini generateContent body (the chat body's turns).
local filler = string.rep("The quick brown fox jumps over the lazy dog. ", 60)
local contents = {}
for i = 1, 12 do
  local role = (i % 2 == 1) and "user" or "model"
  contents[#contents + 1] = string.format('{"role":"%s","parts":[{"text":"Turn %d. %s"}]}', role, i, filler)
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-goog-api-key"] = "bench-key"
wrk.body = '{"systemInstruction":{"parts":[{"text":"You are a helpful assistant."}]},"contents":[' .. table.concat(contents, ",") .. '],"generationConfig":{"maxOutputTokens":1024}}'
