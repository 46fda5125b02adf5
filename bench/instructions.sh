#!/usr/bin/env bash
# User-space instructions per forwarded request, counted by callgrind:
# repeatable to a fraction of a percent for one binary and one input,
# whatever else the machine is doing (requests per second on a shared
# 2-core machine move ±10% between runs). Kernel work (loopback TCP, the
# log's write) is not counted: bench/passthrough.sh measures the whole.
#
# Rows: nginx as a plain reverse proxy, the bare hyper forwarder
# (examples/bare_proxy.rs), and foldgate on its forward-only path and on
# each route it folds (Gemini's with a provider that speaks it), each under `valgrind --tool=callgrind` with wrk
# (one thread, 4 connections) sending the 32 KB bodies of bench/*-32k.lua
# to an nginx that answers at once; counters are zeroed after a warm-up.
# Usage: bench/instructions.sh [seconds]
# With BASELINE_BIN=path/to/an/older/foldgate, that binary gets rows too
# (several paths, space-separated: rows baseline, baseline2, …, in order).
# FOLDGATE_BIN / BARE_BIN run prebuilt binaries instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-4}
for tool in wrk nginx valgrind callgrind_control; do
  command -v "$tool" >/dev/null || { echo "needs $tool: apt-get install -y wrk nginx-light valgrind" >&2; exit 1; }
done
. bench/common.sh
binaries
workdir
UP=18181; PORT=18182

nginx_conf "$WORK" "$(answering "$UP")"
nginx -p "$WORK" -c nginx.conf
# next_port: the next row's port (a port just closed lingers in
# TIME_WAIT), and the proxy nginx's and foldgate's configs listening on it.
next_port() {
  PORT=$((PORT + 1))
  mkdir -p "$WORK/proxy-nginx"
  nginx_conf "$WORK/proxy-nginx" "$(proxying "$PORT" "$UP")" "master_process off; daemon off;"
  # Anthropic Messages go only to a provider of that API.
  printf '[server]\nlisten = "127.0.0.1:%s"\n[providers.bench]\nbase_url = "http://127.0.0.1:%s/v1"\n[providers.bench-anthropic]\nbase_url = "http://127.0.0.1:%s/v1"\napi = "anthropic"\n[state]\npath = "%s/foldgate-%s.db"\n' \
    "$PORT" "$UP" "$UP" "$WORK" "$PORT" > "$WORK/foldgate.toml"
  # The Gemini row's: its one provider speaks Gemini.
  printf '[server]\nlisten = "127.0.0.1:%s"\n[providers.google]\nbase_url = "http://127.0.0.1:%s"\napi = "gemini"\n[state]\npath = "%s/foldgate-%s.db"\n' \
    "$PORT" "$UP" "$WORK" "$PORT" > "$WORK/foldgate-gemini.toml"
}

# count NAME PATH LUA COMMAND...: Ir per request of COMMAND (a server on
# $PORT) under wrk; prints "NAME Ir".
count() {
  local name=$1 path=$2 lua=$3; shift 3
  rm -f "$WORK"/callgrind.out*
  env -u FOLDGATE_BIN valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out" "$@" 2>"$WORK/$name.log" &
  local pid=$!
  for _ in $(seq 150); do curl -s -o /dev/null "http://127.0.0.1:$PORT/foldgate/health" && break; sleep 0.2; done
  wrk -t1 -c4 -d3s -s "bench/$lua" "http://127.0.0.1:$PORT$path" >/dev/null
  callgrind_control -z "$pid" >/dev/null
  local before; before=$(wc -l < "$WORK/access.log")
  wrk -t1 -c4 -d"${DURATION}s" -s "bench/$lua" "http://127.0.0.1:$PORT$path" >/dev/null
  local after; after=$(wc -l < "$WORK/access.log")
  callgrind_control -d "$pid" >/dev/null
  sleep 0.5
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local dump; dump=$(ls -t "$WORK"/callgrind.out.* | head -1)
  local ir; ir=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  echo "$name $((ir / (after - before)))"
}

declare -a ROWS
declare -A IR
run() { local line; line=$(count "$@"); ROWS+=("${line%% *}"); IR[${line%% *}]=${line##* }; echo "$line" >&2; }
next_port; run nginx-proxy /v1/chat/completions chat-32k.lua nginx -p "$WORK/proxy-nginx" -c nginx.conf
next_port; run hyper-bare /v1/chat/completions chat-32k.lua "$BARE" "127.0.0.1:$PORT" "127.0.0.1:$UP"
# routes NAME BIN: the rows of one foldgate, one per route.
routes() {
  next_port; run "$1-json" /v1/embeddings chat-32k.lua "$2" serve --config "$WORK/foldgate.toml"
  next_port; run "$1" /v1/chat/completions chat-32k.lua "$2" serve --config "$WORK/foldgate.toml"
  next_port; run "$1-messages" /v1/messages messages-32k.lua "$2" serve --config "$WORK/foldgate.toml"
  next_port; run "$1-responses" /v1/responses responses-32k.lua "$2" serve --config "$WORK/foldgate.toml"
  next_port; run "$1-gemini" /v1beta/models/gemini-2.5-flash:generateContent gemini-32k.lua "$2" serve --config "$WORK/foldgate-gemini.toml"
}
routes foldgate "$BIN"
n=0
for bin in ${BASELINE_BIN:-}; do
  n=$((n + 1)); routes "baseline$([ "$n" -gt 1 ] && echo "$n")" "$bin"
done

printf '\n%s, callgrind, wrk -c4, %ss a row after a 3 s warm-up\n\n' "$(date -u +%F)" "$DURATION"
echo "| target | instructions/request | vs hyper-bare | vs its forward-only path | vs its chat path |"
echo "|---|---:|---:|---:|---:|"
for row in "${ROWS[@]}"; do
  base=${row%%-*}; json=0; chat=0
  case $base in foldgate|baseline*) json=${IR[$base-json]}; chat=${IR[$base]} ;; esac
  awk -v row="$row" -v ir="${IR[$row]}" -v bare="${IR[hyper-bare]}" -v json="$json" -v chat="$chat" 'BEGIN {
    j = json > 0 ? sprintf("%.2fx", ir / json) : "–"; c = chat > 0 ? sprintf("%.2fx", ir / chat) : "–"
    printf "| %s | %d | %.2fx | %s | %s |\n", row, ir, ir / bare, j, c }'
done
