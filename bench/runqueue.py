#!/usr/bin/env python3
"""Where a row's slow requests wait: the run-queue waits of a bench's own
threads (the proxy's, the upstream nginx's and wrk's), read from
`perf sched timehist` output, and what held the CPU meanwhile.

A wait of 1 ms or more is what a p99 of a few ms is made of on this bench
(a request takes ~0.7 ms at p50). Each such wait counts as the bench's own
when the bench's threads held the CPU for most of it (it would happen on an
idle machine too), else as the machine's (other processes: builds, other
sessions). With the machine busy, the own waits per 1,000 requests are the
steadier figure: the p99 itself moves with whatever else runs.

Usage: runqueue.py TIMEHIST "PIDS" REQUESTS_PER_SECOND
  PIDS: the bench's own processes (space-separated pids).
Prints one line: own long waits per 1,000 requests, which of the bench's
threads waited and which held the CPU, and the run-queue delay per request.
"""

import bisect
import collections
import re
import sys

LONG_MS = 1.0

LINE = re.compile(
    r"\s*([\d.]+)\s+\[(\d+)\]\s+(.+?)\[(\d+)(?:/(\d+))?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
)


def main(path, pids, rps):
    mine = set(pids.split())
    # (switch-out time s, cpu, thread name, pid, run-queue delay ms, run ms)
    slices = []
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if m:
                pid = m[5] or m[4]
                slices.append((float(m[1]), int(m[2]), m[3].strip(), pid, float(m[7]), float(m[8])))
    if not slices:
        print("no scheduler events recorded")
        return
    seconds = slices[-1][0] - slices[0][0]
    requests = rps * seconds
    on_cpu = collections.defaultdict(list)
    for t, cpu, name, pid, _, run in slices:
        on_cpu[cpu].append((t - run / 1e3, t, pid, name))
    for runs in on_cpu.values():
        runs.sort()

    def holders(cpu, start, end):
        """Seconds each of the bench's threads, and the others together,
        ran on `cpu` between `start` and `end`."""
        own, others = collections.Counter(), 0.0
        runs = on_cpu[cpu]
        for s, e, pid, name in runs[bisect.bisect_left(runs, (start - 0.05,)):]:
            if s > end:
                break
            overlap = min(end, e) - max(start, s)
            if overlap > 0:
                if pid in mine:
                    own[name] += overlap
                else:
                    others += overlap
        return own, others

    delay_own = delay_others = 0.0
    long_own = long_all = 0
    waiting, holding = collections.Counter(), collections.Counter()
    for t, cpu, name, pid, delay, run in slices:
        if pid not in mine or delay <= 0:
            continue
        began = t - run / 1e3
        own, others = holders(cpu, began - delay / 1e3, began)
        delay_own += sum(own.values())
        delay_others += others
        if delay >= LONG_MS:
            long_all += 1
            if sum(own.values()) >= others:
                long_own += 1
                waiting[name] += 1
                holding.update({k: v * 1e3 for k, v in own.items()})
    per_k = 1e3 / requests
    who_waited = ", ".join(f"{k} {v}" for k, v in waiting.most_common())
    who_held = ", ".join(f"{k} {v:.0f} ms" for k, v in holding.most_common(3))
    print(
        f"own waits >= {LONG_MS:g} ms: {long_own * per_k:.2f} per 1000 requests "
        f"(of {long_all * per_k:.2f}; waited: {who_waited or '-'}; CPU held by: {who_held or '-'}); "
        f"run-queue delay per request {delay_own * 1e6 / requests:.0f} us behind the bench's own threads, "
        f"{delay_others * 1e6 / requests:.0f} us behind others"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
