# Sourced by the bench scripts: the binaries they measure, their working
# directory, and the nginx they measure against.

# binaries: BIN, the foldgate measured, and BARE, the bare hyper
# forwarder (examples/bare_proxy.rs), built unless FOLDGATE_BIN and
# BARE_BIN name prebuilt ones.
binaries() {
  BIN=${FOLDGATE_BIN:-./target/release/foldgate}
  [ -n "${FOLDGATE_BIN:-}" ] || cargo build --release --quiet
  BARE=${BARE_BIN:-./target/release/examples/bare_proxy}
  [ -n "${BARE_BIN:-}" ] || cargo build --release --quiet --example bare_proxy
}

# workdir: WORK, a fresh directory removed at exit (kept with KEEP=1),
# after the background jobs and the nginx started in it (and the one in
# WORK/own, if any) are stopped.
workdir() {
  WORK=$(mktemp -d)
  trap 'kill $(jobs -p) 2>/dev/null || true; for d in "$WORK" "$WORK/own"; do [ -f "$d/nginx.pid" ] && nginx -p "$d" -c nginx.conf -s stop 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
}

# The answer the upstream nginx gives every request.
CANNED='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":8000,"completion_tokens":2,"total_tokens":8002}}'

# The answer it gives Gemini's generateContent.
CANNED_GEMINI='{"candidates":[{"content":{"role":"model","parts":[{"text":"Hello!"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":8000,"candidatesTokenCount":2,"totalTokenCount":8002},"modelVersion":"gemini-2.5-flash"}'

# nginx_conf DIR HTTP [MAIN] [WORKERS]: writes DIR/nginx.conf — WORKERS
# worker processes (one by default), its pid, logs and temporary files in
# DIR, MAIN's top-level directives, and HTTP inside `http { }`.
nginx_conf() {
  cat > "$1/nginx.conf" <<CONF
worker_processes ${4:-1}; ${3:-}
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 1024; }
http {
  access_log $1/access.log;
  client_body_temp_path $1/body; proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fcgi; uwsgi_temp_path $1/uwsgi; scgi_temp_path $1/scgi;
  client_max_body_size 64m; client_body_buffer_size 64k;
$2
}
CONF
}

# answering PORT: a server that answers CANNED on PORT (CANNED_GEMINI
# to a Gemini model's methods).
answering() {
  echo "  server { listen 127.0.0.1:$1;
    location ~ :(stream)?[gG]enerateContent\$ { default_type application/json; return 200 '$CANNED_GEMINI'; }
    location / { default_type application/json; return 200 '$CANNED'; } }"
}

# proxying PORT UP: nginx as a plain reverse proxy on PORT in front of UP
# (upstream keepalive, no buffering either way).
proxying() {
  cat <<CONF
  upstream backend { server 127.0.0.1:$2; keepalive 64; }
  server { listen 127.0.0.1:$1;
    location / { proxy_pass http://backend; proxy_http_version 1.1;
      proxy_set_header Connection ""; proxy_buffering off; proxy_request_buffering off; } }
CONF
}
