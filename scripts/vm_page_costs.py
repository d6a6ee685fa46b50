#!/usr/bin/env python3
"""What a fresh forked process pays per page on this machine.

The sandbox forks one program process per program from a Python zygote
(docs/sandbox.md), so a validation's cost is dominated by how expensive the
kernel (and, in a VM, the hypervisor) makes the pages a forked child
touches. This script measures, with CPU time from getrusage/wait4:

  read      a child's first read of a page its parent had written
  cow       a child's first write of such a page (copy-on-write)
  fresh     a child's first write of a page it mapped itself
  fork      fork + immediate _exit of this interpreter: child and parent CPU
  fork x2   the same with two copies of this script running at once

Usage: /usr/bin/python3 scripts/vm_page_costs.py [--pages 4000] [--forks 300]
Output: one line per measure, microseconds per page or milliseconds per fork.
docs/benchmarks.md (section 1) quotes a run on the benchmark machine.
"""

import argparse
import mmap
import os
import subprocess
import sys
import time

PAGE = mmap.PAGESIZE


def child_cpu(fn):
    """CPU seconds a forked child spends in fn (user + system)."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        finally:
            os._exit(0)
    _, _, ru = os.wait4(pid, 0)
    return ru.ru_utime + ru.ru_stime


def per_page(pages):
    buf = mmap.mmap(-1, pages * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(pages):
        buf[i * PAGE] = 1
    empty = child_cpu(lambda: None)

    def read():
        s = 0
        for i in range(pages):
            s += buf[i * PAGE]

    def cow():
        for i in range(pages):
            buf[i * PAGE] = 2

    def fresh():
        m = mmap.mmap(-1, pages * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        for i in range(pages):
            m[i * PAGE] = 2

    for name, fn in (("read", read), ("cow", cow), ("fresh", fresh)):
        best = min(child_cpu(fn) for _ in range(3))
        print(f"{name:8s} {max(best - empty, 0) / pages * 1e6:8.2f} µs/page  ({pages} pages, best of 3)")


def forks(n):
    child = parent = 0.0
    t0 = time.process_time()
    for _ in range(n):
        child += child_cpu(lambda: None)
    parent = time.process_time() - t0
    return child / n * 1e3, parent / n * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=4000)
    ap.add_argument("--forks", type=int, default=300)
    ap.add_argument("--fork-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.fork_only:
        print("%.3f %.3f" % forks(a.forks))
        return
    per_page(a.pages)
    c, p = forks(a.forks)
    rss = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("RssAnon"))
    print(f"fork     child {c:.2f} ms, parent {p:.2f} ms CPU per fork + exit ({rss} kB anonymous memory)")
    cmd = [sys.executable, __file__, "--fork-only", "--forks", str(a.forks)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate()[0].split() for p in procs]
    for i, (c2, p2) in enumerate(outs):
        print(f"fork x2  copy {i + 1}: child {float(c2):.2f} ms, parent {float(p2):.2f} ms CPU per fork + exit")


if __name__ == "__main__":
    main()
