"""The first request after start against later ones.

For each foldgate binary given and each route (chat completions, Gemini
generateContent): a canned upstream (a Python HTTP server on loopback),
foldgate started five times on a memory state, and after
`/foldgate/health` first answers, six 32 KB requests (90 messages, in the
route's shape) in a row; prints the median first-request time and the
median of the later ones. Loopback only, bounded (5 starts x 6 requests
per binary and route).

    python3 bench/first_request.py target/release/foldgate [OTHER_BINARY ...]
"""
import http.server, json, socket, subprocess, sys, threading, time, urllib.request, tempfile, os

class Up(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        body = json.dumps({"id": "x", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        self.send_response(200); self.send_header("content-type", "application/json"); self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass

def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

up = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Up)
threading.Thread(target=up.serve_forever, daemon=True).start()
msgs = [{"role": "system", "content": "You are terse."}] + [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}: " + "lorem ipsum dolor sit amet " * 12} for i in range(90)]
contents = [{"role": "user" if m["role"] == "user" else "model", "parts": [{"text": m["content"]}]} for m in msgs[1:]]
ROUTES = {
    "chat": ("/v1/chat/completions", json.dumps({"model": "gpt-4o", "messages": msgs}).encode()),
    "gemini": ("/v1beta/models/gemini-2.5-flash:generateContent",
               json.dumps({"systemInstruction": {"parts": [{"text": msgs[0]["content"]}]}, "contents": contents}).encode()),
}
for binary, route in [(b, r) for b in sys.argv[1:] for r in ROUTES]:
    path, body = ROUTES[route]
    firsts, laters = [], []
    for run in range(5):
        p = port()
        d = tempfile.mkdtemp()
        cfg = os.path.join(d, "c.toml")
        open(cfg, "w").write(f'[server]\nlisten = "127.0.0.1:{p}"\n[providers.up]\nbase_url = "http://127.0.0.1:{up.server_port}/v1"\nmodels = ["*"]\n[providers.google]\nbase_url = "http://127.0.0.1:{up.server_port}"\napi = "gemini"\nmodels = ["gemini-*"]\n[state]\nbackend = "memory"\n[tokens]\ndiscover = false\n')
        fg = subprocess.Popen([binary, "serve", "--config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{p}/foldgate/health", timeout=5).read(); break
            except OSError:
                time.sleep(0.01)
        times = []
        for i in range(6):
            req = urllib.request.Request(f"http://127.0.0.1:{p}{path}", data=body, headers={"content-type": "application/json", "x-conversation-id": f"c{i}"})
            t = time.perf_counter(); urllib.request.urlopen(req).read(); times.append((time.perf_counter() - t) * 1e3)
        fg.terminate(); fg.wait()
        firsts.append(times[0]); laters.append(sorted(times[1:])[2])
    firsts.sort(); laters.sort()
    print(f"{os.path.basename(binary)} {route}: first request median {firsts[2]:.1f} ms (runs: {', '.join(f'{x:.0f}' for x in firsts)}), later requests median {laters[2]:.1f} ms")
