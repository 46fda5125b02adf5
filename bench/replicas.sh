#!/usr/bin/env bash
# Scale-out, as BENCHMARKS.md asks: requests/s of three foldgate replicas
# against one, behind the same nginx (examples/nginx.conf's settings), in
# one run, on untouched turns (bench/chat-32k.lua) and reuse turns
# (bench/reuse-32k.lua: the same body folded once, then reused), with state
# and archive on one redis-server (single node, no persistence) on loopback.
# Rounds interleave the four rows; each row gives req/s, p50 and p99 (wrk
# --latency, medians over rounds), its ratio to the one-replica row of the
# same workload, and from /proc and Redis over all its rounds: each
# replica's CPU (cores used while wrk ran), foldgate's CPU per request,
# nginx's and Redis's CPU, and Redis commands per request (`INFO
# commandstats`, its own INFO calls and the replicas' PINGs left out).
# Usage: bench/replicas.sh [seconds-per-round] [rounds] [connections]
# FOLDGATE_BIN=path runs that binary instead of building
# target/release/foldgate. Everything stops by itself at the end (or on
# Ctrl-C); nothing leaves loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
ROUNDS=${2:-3}
CONNS=${3:-32}
for tool in wrk nginx redis-server redis-cli; do
  command -v "$tool" >/dev/null || {
    echo "needs wrk, nginx and redis-server: apt-get install -y wrk nginx-light redis-server" >&2; exit 1; }
done
. bench/common.sh
BIN=${FOLDGATE_BIN:-./target/release/foldgate}
[ -n "${FOLDGATE_BIN:-}" ] || cargo build --release --quiet
workdir
UP=18091; SUM=18098; LB1=18092; LB3=18093; REDIS=18094; PORTS=(18095 18096 18097)

redis-server --port "$REDIS" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
  >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
for _ in $(seq 50); do redis-cli -p "$REDIS" ping >/dev/null 2>&1 && break; sleep 0.1; done

# The balancer as examples/nginx.conf has it (keepalive 32, no buffering),
# once in front of the first replica and once in front of all three.
balancer() {
  local servers=""
  for port in "${@:3}"; do servers+="server 127.0.0.1:$port; "; done
  cat <<CONF
  upstream $1 { $servers keepalive 32; }
  server { listen 127.0.0.1:$2;
    location / { proxy_pass http://$1; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffering off; proxy_read_timeout 600s; client_max_body_size 64m; } }
CONF
}
# The summarizer's answer: a valid summary (nginx turns \\\" into \").
SUMMARY='{"id":"chatcmpl-sum","object":"chat.completion","created":1700000000,"model":"bench-fold","choices":[{"index":0,"message":{"role":"assistant","content":"{\\\"summary\\\":\\\"The user asked twelve times about the quick brown fox.\\\",\\\"facts\\\":[],\\\"goals\\\":[],\\\"decisions\\\":[],\\\"open_items\\\":[],\\\"artifacts\\\":[]}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":8000,"completion_tokens":20,"total_tokens":8020}}'
nginx_conf "$WORK" "  server { listen 127.0.0.1:$SUM;
    location / { default_type application/json; return 200 '$SUMMARY'; } }
$(answering "$UP")
$(balancer one "$LB1" "${PORTS[0]}")
$(balancer three "$LB3" "${PORTS[@]}")"
nginx -p "$WORK" -c nginx.conf

PIDS=()
for i in 0 1 2; do
  cat > "$WORK/replica-$i.toml" <<CONF
[server]
listen = "127.0.0.1:${PORTS[$i]}"
[providers.bench]
base_url = "http://127.0.0.1:$UP/v1"
[providers.summarizer]
base_url = "http://127.0.0.1:$SUM/v1"
models = ["summarizer-only"]
[summarizer]
provider = "summarizer"
[models."bench-fold"]
context_window = 8192
[state]
backend = "redis"
url = "redis://127.0.0.1:$REDIS/0"
CONF
  env -u FOLDGATE_BIN FOLDGATE_LOG="${FOLDGATE_LOG:-info}" "$BIN" serve --config "$WORK/replica-$i.toml" 2>"$WORK/replica-$i.log" &
  PIDS+=($!)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:${PORTS[$i]}/foldgate/health" >/dev/null && break; sleep 0.1; done
done

# One reuse body folds on the first replica, then every replica reads the
# fold (each once, cold); wrk at one connection warms every replica.
for i in 0 1 2; do
  wrk -t1 -c1 -d1s -s bench/reuse-32k.lua "http://127.0.0.1:${PORTS[$i]}/v1/chat/completions" >/dev/null
  wrk -t1 -c1 -d1s -s bench/chat-32k.lua "http://127.0.0.1:${PORTS[$i]}/v1/chat/completions" >/dev/null
done
metric() { curl -sf "http://127.0.0.1:$1/foldgate/metrics" | awk -v m="$2" '$1 ~ "^"m { s += $NF } END { print s + 0 }'; }
for i in 0 1 2; do
  echo "replica $i: $(metric "${PORTS[$i]}" foldgate_folds_total) folds, $(metric "${PORTS[$i]}" foldgate_summarizer_calls) summarizer calls, $(metric "${PORTS[$i]}" foldgate_folds_reused) reused" >&2
done

CLK=$(getconf CLK_TCK)
# ticks PID…: user + system CPU ticks of the processes, summed.
ticks() { for p in "$@"; do awk '{ print $14 + $15 }' "/proc/$p/stat"; done | awk '{ s += $1 } END { print s + 0 }'; }
nginx_pids() { echo "$(cat "$WORK/nginx.pid") $(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')"; }
# Redis commands so far, but this script's INFO and the replicas' PINGs
# (each subscription pings every 5 s when idle: not per request).
commands() { redis-cli -p "$REDIS" info commandstats | awk -F'[:=,]' '/^cmdstat_/ && $1 != "cmdstat_info" && $1 != "cmdstat_ping" { s += $3 } END { print s + 0 }'; }

# Prints "rps p50_ms p99_ms requests": measure URL SCRIPT.
measure() {
  wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency -s "$2" "$1" | awk '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    /Requests\/sec/ { rps = $2 } / 50%/ { p50 = ms($2) } / 99%/ { p99 = ms($2) } / requests in / { n = $1 }
    /Non-2xx/ { bad = $NF } END { if (bad) print "non-2xx responses: " bad > "/dev/stderr"; printf "%s %.3f %.3f %s\n", rps, p50, p99, n }'
}

ROWS=(one-untouched three-untouched one-reuse three-reuse)
declare -A URL=([one-untouched]="http://127.0.0.1:$LB1/v1/chat/completions"
  [three-untouched]="http://127.0.0.1:$LB3/v1/chat/completions"
  [one-reuse]="http://127.0.0.1:$LB1/v1/chat/completions"
  [three-reuse]="http://127.0.0.1:$LB3/v1/chat/completions")
declare -A SCRIPT=([one-untouched]=bench/chat-32k.lua [three-untouched]=bench/chat-32k.lua
  [one-reuse]=bench/reuse-32k.lua [three-reuse]=bench/reuse-32k.lua)
declare -A RPS P50 P99 REQS CPU0 CPU1 CPU2 CPUN CPUR CMDS
for row in "${ROWS[@]}"; do REQS[$row]=0; CPU0[$row]=0; CPU1[$row]=0; CPU2[$row]=0; CPUN[$row]=0; CPUR[$row]=0; CMDS[$row]=0; done
for round in $(seq "$ROUNDS"); do
  for row in "${ROWS[@]}"; do
    NGINX=$(nginx_pids)
    # shellcheck disable=SC2086
    b0=$(ticks "${PIDS[0]}"); b1=$(ticks "${PIDS[1]}"); b2=$(ticks "${PIDS[2]}"); bn=$(ticks $NGINX); br=$(ticks "$REDIS_PID"); bc=$(commands)
    read -r rps p50 p99 n < <(measure "${URL[$row]}" "${SCRIPT[$row]}")
    # shellcheck disable=SC2086
    a0=$(ticks "${PIDS[0]}"); a1=$(ticks "${PIDS[1]}"); a2=$(ticks "${PIDS[2]}"); an=$(ticks $NGINX); ar=$(ticks "$REDIS_PID"); ac=$(commands)
    RPS[$row]+="$rps "; P50[$row]+="$p50 "; P99[$row]+="$p99 "
    REQS[$row]=$((REQS[$row] + n)); CMDS[$row]=$((CMDS[$row] + ac - bc))
    CPU0[$row]=$((CPU0[$row] + a0 - b0)); CPU1[$row]=$((CPU1[$row] + a1 - b1)); CPU2[$row]=$((CPU2[$row] + a2 - b2))
    CPUN[$row]=$((CPUN[$row] + an - bn)); CPUR[$row]=$((CPUR[$row] + ar - br))
    echo "round $round $row: $rps req/s, p50 $p50 ms, p99 $p99 ms; CPU ticks $((a0 - b0)) $((a1 - b1)) $((a2 - b2)), nginx $((an - bn)), redis $((ar - br)); $((ac - bc)) Redis commands" >&2
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '\n%s, %s cores, wrk -t1 -c%s, %ss x %s rounds (req/s and latency: medians; CPU and commands: over all rounds)\n\n' \
  "$(date -u +%F)" "$(nproc)" "$CONNS" "$DURATION" "$ROUNDS"
echo "| target | req/s | p50 ms | p99 ms | req/s vs one replica | cores used by replica a / b / c | foldgate CPU µs per request | nginx cores | redis cores | Redis commands per request | req/s by round |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for row in "${ROWS[@]}"; do
  base="one-${row#*-}"
  r=$(echo "${RPS[$row]}" | median); b=$(echo "${RPS[$base]}" | median)
  p50=$(echo "${P50[$row]}" | median); p99=$(echo "${P99[$row]}" | median)
  awk -v row="$row" -v r="$r" -v b="$b" -v p50="$p50" -v p99="$p99" -v clk="$CLK" -v secs="$((DURATION * ROUNDS))" \
    -v c0="${CPU0[$row]}" -v c1="${CPU1[$row]}" -v c2="${CPU2[$row]}" -v cn="${CPUN[$row]}" -v cr="${CPUR[$row]}" \
    -v n="${REQS[$row]}" -v cmds="${CMDS[$row]}" -v rounds="${RPS[$row]% }" \
    'BEGIN { gsub(/ /, ", ", rounds); t = clk * secs
      printf "| %s | %.0f | %.3f | %.3f | %.2fx | %.2f / %.2f / %.2f | %.1f | %.2f | %.2f | %.4f | %s |\n",
        row, r, p50, p99, r / b, c0 / t, c1 / t, c2 / t, (c0 + c1 + c2) / clk * 1e6 / n, cn / t, cr / t, cmds / n, rounds }'
done
for i in 0 1 2; do
  echo "replica $i at the end: $(metric "${PORTS[$i]}" foldgate_folds_total) folds, $(metric "${PORTS[$i]}" foldgate_summarizer_calls) summarizer calls" >&2
done
