"""A scripted Anthropic Messages upstream for scripts/real-agents: answers
Claude Code with N Bash tool calls (each printing 400 lines), then a final
text; answers foldgate's summarizer calls with a fixed JSON summary; rejects
and logs requests that break the API's tool pairing. Usage: PORT LOG N"""
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
LOG = open(sys.argv[2], "a")
state = {"calls": 0}
lock = threading.Lock()
SUMMARY = json.dumps({"summary": "The agent ran seq commands.", "facts": ["seq ran"], "goals": ["finish"], "decisions": [], "open_items": [], "artifacts": []})

def violation(body):
    ms = body.get("messages", [])
    if not ms or ms[0]["role"] != "user": return "first message not user"
    def ids(m, kind, key):
        c = m.get("content")
        return [b.get(key) for b in c if isinstance(b, dict) and b.get("type") == kind] if isinstance(c, list) else []
    for i, m in enumerate(ms):
        res = ids(m, "tool_result", "tool_use_id")
        prev = ids(ms[i-1], "tool_use", "id") if i else []
        if any(r not in prev for r in res): return f"messages.{i}: orphan tool_result"
        calls = ids(m, "tool_use", "id")
        if calls and i + 1 < len(ms):
            nxt = ids(ms[i+1], "tool_result", "tool_use_id")
            if any(c not in nxt for c in calls): return f"messages.{i}: tool_use without result"
    return None

class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        path = self.path
        rec = {"path": path, "len": int(self.headers["content-length"]), "model": body.get("model"),
               "n_messages": len(body.get("messages", [])), "violation": violation(body) if "messages" in body else None,
               "system_blocks": len(body["system"]) if isinstance(body.get("system"), list) else None,
               "folded": "[foldgate] Summary" in json.dumps(body.get("system", "")),
               "headers": {k: v for k, v in self.headers.items() if k.lower() in ("x-api-key", "authorization", "anthropic-version", "anthropic-beta")}}
        LOG.write(json.dumps(rec) + "\n"); LOG.flush()
        if "count_tokens" in path:
            return self.send_json({"input_tokens": rec["len"] // 4})
        system = body.get("system")
        if isinstance(system, str) and "running memory of a long conversation" in system:
            return self.send_json({"id": "msg_s", "type": "message", "role": "assistant", "model": body["model"],
                "content": [{"type": "text", "text": SUMMARY}], "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 10}})
        if rec["violation"]:
            return self.send_json({"type": "error", "error": {"type": "invalid_request_error", "message": rec["violation"]}}, 400)
        blocks = [{"type": "text", "text": "Done."}]
        stop = "end_turn"
        if body.get("tools") and len(body["tools"]) > 3:
            with lock:
                state["calls"] += 1; n = state["calls"]
            if n <= int(sys.argv[3]):
                blocks = [{"type": "text", "text": f"Running step {n}."},
                          {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash", "input": {"command": f"seq 1 400 | sed 's/^/step {n} line /'", "description": f"step {n}"}}]
                stop = "tool_use"
        usage = {"input_tokens": rec["len"] // 4, "output_tokens": 20}
        msg = {"id": f"msg_{rec['len']}", "type": "message", "role": "assistant", "model": body["model"], "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            msg.update(content=blocks, stop_reason=stop)
            return self.send_json(msg)
        self.send_response(200); self.send_header("content-type", "text/event-stream"); self.end_headers()
        def ev(name, data): self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        ev("message_start", {"type": "message_start", "message": msg})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
                ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}})
            else:
                ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}})
            ev("content_block_stop", {"type": "content_block_stop", "index": i})
        ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 20}})
        ev("message_stop", {"type": "message_stop"})
    def send_json(self, v, status=200):
        data = json.dumps(v).encode()
        self.send_response(status); self.send_header("content-type", "application/json"); self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
