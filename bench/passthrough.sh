#!/usr/bin/env bash
# Passthrough overhead, measured as BENCHMARKS.md describes: one run,
# interleaved rounds — nginx direct, nginx as a plain reverse proxy, and
# foldgate on each route it folds (chat completions, Anthropic Messages,
# OpenAI Responses, Gemini) and on one it only forwards — all POSTing a
# 32 KB body (bench/*-32k.lua) with wrk. The Gemini row is a second
# foldgate of the same binary whose one provider speaks Gemini (as the
# first one's speaks OpenAI; Anthropic Messages go to a provider of their
# own API, the only one that takes them), so neither reads a body's model
# to route.
# Each row gives req/s, p50 and p99 latency (wrk --latency; medians over
# the rounds) and their ratios to nginx-proxy's in the same run.
# Usage: bench/passthrough.sh [seconds-per-round] [rounds] [connections]
# With BASELINE_BIN=path/to/an/older/foldgate, that binary runs beside this
# build (same config) and gets rows of its own, interleaved in the same
# rounds: a before/after from one run. FOLDGATE_BIN=path runs that binary
# as "this build" instead of building target/release/foldgate.
# The hyper-bare row is examples/bare_proxy.rs: the same runtime, server
# and client as foldgate doing nothing but forwarding (the stack's floor);
# BARE_BIN=path runs a prebuilt one.
# PIN=1 sets foldgate's server.pin_workers (each runtime thread on a core
# of its own; a BASELINE_BIN without the key refuses to start).
# SCHED=1 (needs Linux perf): in the first round, 2 s of each row's run
# are recorded with `perf sched` and bench/runqueue.py says where its
# threads waited for a core and behind whom.
# nginx-proxy shares its one worker with the upstream (proxy and upstream
# are one thread); nginx-proxy-Nw is nginx as the same reverse proxy in a
# process of its own with foldgate's worker count, N (WORKERS, a worker
# per core by default; given to every tokio process here, foldgate,
# baseline and hyper-bare, as TOKIO_WORKER_THREADS, which foldgate's
# server.worker_threads = 0 defers to, so older binaries take it too): the
# like-for-like comparison for the p99, since on two cores a proxy's tail
# is mostly its threads waiting for a core behind wrk, the upstream and
# each other (docs/benchmarks.md, "Passthrough overhead").
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
ROUNDS=${2:-3}
CONNS=${3:-16}
command -v wrk >/dev/null && command -v nginx >/dev/null || {
  echo "needs wrk and nginx: apt-get install -y wrk nginx-light" >&2; exit 1; }
. bench/common.sh
binaries
workdir
UP=18081; PROXY=18082; FG=18083; BASE=18084; BAREP=18085; FGG=18086; BASEG=18087; OWN=18088
WORKERS=${WORKERS:-$(nproc)}

nginx_conf "$WORK" "$(answering "$UP")
$(proxying "$PROXY" "$UP")"
nginx -p "$WORK" -c nginx.conf
mkdir "$WORK/own"
nginx_conf "$WORK/own" "$(proxying "$OWN" "$UP")" "" "$WORKERS"
nginx -p "$WORK/own" -c nginx.conf
cat > "$WORK/template.toml" <<CONF
[server]
listen = "127.0.0.1:$FG"
$( [ -n "${PIN:-}" ] && echo "pin_workers = true" || true )
[providers.bench]
base_url = "http://127.0.0.1:$UP/v1"
[providers.bench-anthropic]
base_url = "http://127.0.0.1:$UP/v1"
api = "anthropic"
[state]
path = "$WORK/foldgate.db"
CONF
sed -e '/^\[providers.bench\]/,/^base_url/c [providers.google]\nbase_url = "http://127.0.0.1:'"$UP"'"\napi = "gemini"' \
  "$WORK/template.toml" > "$WORK/template-gemini.toml"
# The processes of each foldgate, nginx and hyper-bare (SCHED=1 reads them).
declare -A PIDS
# start BIN PORT NAME [TEMPLATE]: one foldgate on the config above (or
# TEMPLATE.toml), listening on PORT.
start() {
  sed -e "s/127.0.0.1:$FG\"/127.0.0.1:$2\"/" -e "s/foldgate.db/$3.db/" "$WORK/${4:-template}.toml" > "$WORK/$3.toml"
  env -u FOLDGATE_BIN TOKIO_WORKER_THREADS="$WORKERS" FOLDGATE_LOG="${FOLDGATE_LOG:-info}" "$1" serve --config "$WORK/$3.toml" 2>"$WORK/$3.log" &
  PIDS[$3]=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$2/foldgate/health" >/dev/null && break; sleep 0.1; done
}
start "$BIN" "$FG" foldgate
start "$BIN" "$FGG" foldgate-gemini template-gemini
TOKIO_WORKER_THREADS="$WORKERS" "$BARE" "127.0.0.1:$BAREP" "127.0.0.1:$UP" &
PIDS[hyper-bare]=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$BAREP/" && break; sleep 0.1; done
[ -n "${BASELINE_BIN:-}" ] && start "$BASELINE_BIN" "$BASE" baseline && start "$BASELINE_BIN" "$BASEG" baseline-gemini template-gemini

# Prints "rps p50_ms p99_ms" for one wrk run: measure URL SCRIPT [ROW];
# with ROW (and SCHED=1), also where ROW's threads waited for a core.
measure() {
  wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency -s "$2" "$1" > "$WORK/wrk.out" &
  local wrk=$!
  if [ -n "${3:-}" ]; then
    sleep $((DURATION / 3))
    perf sched record -o "$WORK/sched.data" -- sleep 2 >/dev/null 2>&1
    perf sched timehist -i "$WORK/sched.data" > "$WORK/$3.timehist" 2>/dev/null
  fi
  wait "$wrk"
  if [ -n "${3:-}" ]; then
    local own upstream
    upstream=$(pgrep -d' ' -P "$(cat "$WORK/nginx.pid")")
    case $3 in
      direct|nginx-proxy) own="" ;;
      nginx-proxy-*) own=$(pgrep -d' ' -P "$(cat "$WORK/own/nginx.pid")") ;;
      *-gemini) own=${PIDS[$3]} ;;
      *) own=${PIDS[${3%%-*}]:-${PIDS[$3]}} ;;
    esac
    echo "  $3: $(python3 bench/runqueue.py "$WORK/$3.timehist" "$own $upstream $wrk" "$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk.out")")" >&2
  fi
  awk '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    /Requests\/sec/ { rps = $2 } / 50%/ { p50 = ms($2) } / 99%/ { p99 = ms($2) }
    /Non-2xx/ { bad = $NF } END { if (bad) print "non-2xx responses: " bad > "/dev/stderr"; printf "%s %.3f %.3f\n", rps, p50, p99 }' "$WORK/wrk.out"
}

declare -A RPS P50 P99
# foldgate-json posts the chat body to a path foldgate does not intercept:
# the proxy core alone (read, route by model, forward), without the pipeline.
OWNROW=nginx-proxy-${WORKERS}w
ROWS=(direct nginx-proxy "$OWNROW" hyper-bare)
declare -A URL=([direct]="http://127.0.0.1:$UP/v1/chat/completions"
  [nginx-proxy]="http://127.0.0.1:$PROXY/v1/chat/completions"
  [$OWNROW]="http://127.0.0.1:$OWN/v1/chat/completions"
  [hyper-bare]="http://127.0.0.1:$BAREP/v1/chat/completions")
declare -A SCRIPT
# routes NAME PORT GEMINI_PORT: the rows of one foldgate, one per route.
routes() {
  ROWS+=("$1" "$1-messages" "$1-responses" "$1-gemini" "$1-json")
  URL[$1]="http://127.0.0.1:$2/v1/chat/completions"
  URL[$1-messages]="http://127.0.0.1:$2/v1/messages"
  URL[$1-responses]="http://127.0.0.1:$2/v1/responses"
  URL[$1-gemini]="http://127.0.0.1:$3/v1beta/models/gemini-2.5-flash:generateContent"
  URL[$1-json]="http://127.0.0.1:$2/v1/embeddings"
  SCRIPT[$1-messages]=bench/messages-32k.lua; SCRIPT[$1-responses]=bench/responses-32k.lua
  SCRIPT[$1-gemini]=bench/gemini-32k.lua
}
routes foldgate "$FG" "$FGG"
[ -n "${BASELINE_BIN:-}" ] && routes baseline "$BASE" "$BASEG"
for row in "${ROWS[@]}"; do curl -sf -o /dev/null -X POST -H 'content-type: application/json' -d '{"model":"gpt-4o-mini","messages":[],"input":[],"contents":[]}' "${URL[$row]}" || { echo "$row is not answering; its log:" >&2; tail -5 "$WORK/${row%%-*}.log" >&2 2>/dev/null; exit 1; }; done
for round in $(seq "$ROUNDS"); do
  for row in "${ROWS[@]}"; do
    sched=""; [ -n "${SCHED:-}" ] && [ "$round" = 1 ] && sched=$row
    read -r rps p50 p99 < <(measure "${URL[$row]}" "${SCRIPT[$row]:-bench/chat-32k.lua}" "$sched")
    RPS[$row]+="$rps "; P50[$row]+="$p50 "; P99[$row]+="$p99 "
    echo "round $round $row: $rps req/s, p50 $p50 ms, p99 $p99 ms" >&2
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '\n%s, %s cores, wrk -c%s, %ss x %s rounds (medians)\n\n' "$(date -u +%F)" "$(nproc)" "$CONNS" "$DURATION" "$ROUNDS"
# p99 beside p50: the median of the rounds' p99s, its ratio to
# nginx-proxy's (issue 38's goal: foldgate's chat path within 1.5x) and to
# the nginx proxy with foldgate's worker count, and every round's p99, so
# the spread shows beside the median.
echo "foldgate, hyper-bare and $OWNROW: $WORKERS worker(s); nginx-proxy: one worker, shared with the upstream"
echo
echo "| target | req/s | p50 ms | p99 ms | req/s vs direct | req/s vs nginx-proxy | p50 vs nginx-proxy | p99 vs nginx-proxy | p99 vs $OWNROW | req/s vs its chat path | p99 ms by round |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
d=$(echo "${RPS[direct]}" | median); n=$(echo "${RPS[nginx-proxy]}" | median)
np50=$(echo "${P50[nginx-proxy]}" | median); np99=$(echo "${P99[nginx-proxy]}" | median)
op99=$(echo "${P99[$OWNROW]}" | median)
for row in "${ROWS[@]}"; do
  r=$(echo "${RPS[$row]}" | median); p50=$(echo "${P50[$row]}" | median); p99=$(echo "${P99[$row]}" | median)
  chat=${row%%-*}; c=0; case $chat in foldgate|baseline) c=$(echo "${RPS[$chat]}" | median) ;; esac
  awk -v row="$row" -v r="$r" -v p50="$p50" -v p99="$p99" -v d="$d" -v n="$n" -v np50="$np50" -v np99="$np99" \
    -v op99="$op99" -v c="$c" -v rounds="${P99[$row]% }" \
    'BEGIN { vs = c > 0 ? sprintf("%.2fx", r/c) : "–"; gsub(/ /, ", ", rounds)
      printf "| %s | %.0f | %.3f | %.3f | %.2fx | %.2fx | %+.3f ms | %.2fx | %.2fx | %s | %s |\n", row, r, p50, p99, r/d, r/n, p50-np50, p99/np99, p99/op99, vs, rounds }'
done
