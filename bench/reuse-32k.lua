-- wrk script: the 32 KB chat body of chat-32k.lua for a model whose window
-- it overflows (bench/replicas.sh gives `bench-fold` 8,192 tokens), so the
-- first request folds it and every later one reuses that fold.
dofile("bench/chat-32k.lua")
wrk.body = wrk.body:gsub('"gpt%-4o%-mini"', '"bench-fold"')
