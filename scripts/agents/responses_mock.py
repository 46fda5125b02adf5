"""A scripted OpenAI Responses upstream for scripts/real-agents: answers
Codex with N shell calls (reasoning item + function_call, each printing 400
lines), then a final message; answers foldgate's summarizer (chat
completions) with a fixed JSON summary; rejects and logs requests that break
call/output pairing. Usage: PORT LOG N"""
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
LOG = open(sys.argv[2], "a")
state = {"calls": 0}
lock = threading.Lock()
SUMMARY = json.dumps({"summary": "The agent ran seq commands.", "facts": ["seq ran"], "goals": ["finish"], "decisions": [], "open_items": [], "artifacts": []})

def violation(items):
    calls, outs = {}, set()
    for i, it in enumerate(items):
        t = it.get("type", "message")
        if t.endswith("_call") and "call_id" in it: calls[it["call_id"]] = i
        if t.endswith("_call_output"):
            if it["call_id"] not in calls: return f"input[{i}]: output without call"
            outs.add(it["call_id"])
        if t == "reasoning" and (i + 1 >= len(items) or items[i+1].get("type") not in ("function_call", "custom_tool_call", "local_shell_call", "message")):
            return f"input[{i}]: dangling reasoning"
    missing = [c for c in calls if c not in outs]
    return f"calls without output: {missing}" if missing else None

class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_json({"object": "list", "data": [{"id": "gpt-5-codex", "object": "model"}]})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        items = body.get("input") if isinstance(body.get("input"), list) else []
        rec = {"path": self.path, "len": int(self.headers["content-length"]), "n_items": len(items),
               "violation": violation(items), "folded": "[foldgate] Summary" in json.dumps(items),
               "tools": [t.get("name") or t.get("type") for t in body.get("tools", [])], "keys": list(body.keys())}
        LOG.write(json.dumps(rec) + "\n"); LOG.flush()
        if "chat/completions" in self.path:
            return self.send_json({"id": "s", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": SUMMARY}, "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})
        if rec["violation"]:
            return self.send_json({"error": {"message": rec["violation"], "type": "invalid_request_error"}}, 400)
        with lock:
            state["calls"] += 1; n = state["calls"]
        tool = next((t for t in body.get("tools", []) if t.get("type") == "function" and t.get("name") in ("shell", "shell_command", "exec_command")), None)
        if n <= int(sys.argv[3]) and tool:
            params = tool.get("parameters", {}).get("properties", {})
            cmd = f"seq 1 400 | sed 's/^/step {n} line /'"
            args = {"command": ["bash", "-lc", cmd]} if params.get("command", {}).get("type") == "array" else ({"cmd": cmd} if "cmd" in params else {"command": cmd})
            output = [{"type": "reasoning", "id": f"rs_{n}", "summary": [{"type": "summary_text", "text": f"thinking {n}"}]},
                      {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": tool["name"], "arguments": json.dumps(args), "status": "completed"}]
        else:
            output = [{"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}]
        resp = {"id": f"resp_{n}", "object": "response", "created_at": 1, "status": "completed", "model": body.get("model"), "output": output,
                "usage": {"input_tokens": rec["len"] // 4, "output_tokens": 20, "total_tokens": rec["len"] // 4 + 20, "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}}
        self.send_response(200); self.send_header("content-type", "text/event-stream"); self.end_headers()
        seq = 0
        def ev(data):
            nonlocal seq
            data["sequence_number"] = seq; seq += 1
            self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
        ev({"type": "response.created", "response": dict(resp, status="in_progress", output=[])})
        for i, it in enumerate(output):
            ev({"type": "response.output_item.added", "output_index": i, "item": it})
            ev({"type": "response.output_item.done", "output_index": i, "item": it})
        ev({"type": "response.completed", "response": resp})
    def send_json(self, v, status=200):
        data = json.dumps(v).encode()
        self.send_response(status); self.send_header("content-type", "application/json"); self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
