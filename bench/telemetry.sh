#!/usr/bin/env bash
# What traces cost on the chat path (docs/telemetry.md): user-space
# instructions per forwarded request, counted by callgrind as
# bench/instructions.sh counts them, in one run, for foldgate without
# [telemetry], with it at sampling_ratio 0 and at 1, and (with
# BASELINE_BIN) an older binary without it. The collector is an nginx on
# loopback answering every export at once with an empty (valid) OTLP
# response, so the rows count foldgate's side: spans made, queued,
# encoded and posted by its export thread.
# Usage: bench/telemetry.sh [seconds]; FOLDGATE_BIN runs a prebuilt binary;
# KEEP=1 keeps the work directory with each row's callgrind dump (NAME.callgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-4}
for tool in wrk nginx valgrind callgrind_control; do
  command -v "$tool" >/dev/null || { echo "needs $tool: apt-get install -y wrk nginx-light valgrind" >&2; exit 1; }
done
. bench/common.sh
BIN=${FOLDGATE_BIN:-./target/release/foldgate}
[ -n "${FOLDGATE_BIN:-}" ] || cargo build --release --quiet
workdir
UP=18281; SINK=18282; PORT=18283

nginx_conf "$WORK" "$(answering "$UP")
  server { listen 127.0.0.1:$SINK; access_log off;
    location = /v1/traces { default_type application/x-protobuf; return 200 ''; } }"
nginx -p "$WORK" -c nginx.conf

# count NAME TELEMETRY BIN: Ir per chat request of BIN with TELEMETRY as
# its [telemetry] section's keys; prints "NAME Ir".
count() {
  local name=$1 telemetry=$2 bin=$3
  PORT=$((PORT + 1))
  printf '[server]\nlisten = "127.0.0.1:%s"\n[providers.bench]\nbase_url = "http://127.0.0.1:%s/v1"\n[state]\npath = "%s/foldgate-%s.db"\n%s' \
    "$PORT" "$UP" "$WORK" "$PORT" "$telemetry" > "$WORK/foldgate.toml"
  rm -f "$WORK"/callgrind.out*
  env -u FOLDGATE_BIN valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out" "$bin" serve --config "$WORK/foldgate.toml" 2>"$WORK/$name.log" &
  local pid=$!
  for _ in $(seq 150); do curl -s -o /dev/null "http://127.0.0.1:$PORT/foldgate/health" && break; sleep 0.2; done
  wrk -t1 -c4 -d3s -s bench/chat-32k.lua "http://127.0.0.1:$PORT/v1/chat/completions" >/dev/null
  callgrind_control -z "$pid" >/dev/null
  local before; before=$(wc -l < "$WORK/access.log")
  wrk -t1 -c4 -d"${DURATION}s" -s bench/chat-32k.lua "http://127.0.0.1:$PORT/v1/chat/completions" >/dev/null
  local after; after=$(wc -l < "$WORK/access.log")
  # The export thread sends what these requests queued (a batch goes
  # 200 ms after its first span) before the counters are read.
  sleep 1
  callgrind_control -d "$pid" >/dev/null
  sleep 0.5
  local dropped; dropped=$(curl -s "http://127.0.0.1:$PORT/foldgate/metrics" | awk '/^foldgate_telemetry_spans_dropped_total/ { print $2 }')
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local dump; dump=$(ls -t "$WORK"/callgrind.out.* | head -1)
  [ -z "${KEEP:-}" ] || cp "$dump" "$WORK/$name.callgrind"
  local ir; ir=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  echo "$name $((ir / (after - before))) ${dropped:-–}"
}

SINK_URL="http://127.0.0.1:$SINK"
declare -a ROWS
[ -n "${BASELINE_BIN:-}" ] && ROWS+=("$(count baseline '' "$BASELINE_BIN")")
ROWS+=("$(count off '' "$BIN")")
ROWS+=("$(count sampling-0 "[telemetry]
endpoint = \"$SINK_URL\"
sampling_ratio = 0.0
" "$BIN")")
ROWS+=("$(count sampling-1 "[telemetry]
endpoint = \"$SINK_URL\"
sampling_ratio = 1.0
" "$BIN")")

off=$(printf '%s\n' "${ROWS[@]}" | awk '$1 == "off" { print $2 }')
printf '\n%s, callgrind, wrk -c4, chat route (32 KB body), %ss a row after a 3 s warm-up\n\n' "$(date -u +%F)" "$DURATION"
echo "| foldgate | instructions/request | vs telemetry off | spans dropped |"
echo "|---|---:|---:|---:|"
for row in "${ROWS[@]}"; do
  set -- $row
  awk -v name="$1" -v ir="$2" -v off="$off" -v dropped="$3" 'BEGIN {
    printf "| %s | %d | %.4fx | %s |\n", name, ir, ir / off, dropped }'
done
