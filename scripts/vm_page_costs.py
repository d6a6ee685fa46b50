#!/usr/bin/env python3
"""What a fresh forked process pays per page on this machine.

The sandbox forks one program process per program from a Python zygote
(docs/sandbox.md), so a validation's cost is dominated by how expensive the
kernel (and, in a VM, the hypervisor) makes the pages a forked child
touches. This script measures CPU time (getrusage, wait4):

  read    a child's first read of a page its parent had written
  cow     a child's first write of such a page (copy-on-write)
  fresh   a child's first write of a page it mapped itself

and then three workloads, each in a fresh interpreter, alone and with two
copies running at once, to show which of them scale across cores:

  fork    fork + immediate _exit of the interpreter (child and parent CPU)
  faults  first writes of fresh pages in one process (no fork)
  spin    a CPU-bound Python loop

Usage: /usr/bin/python3 scripts/vm_page_costs.py [--pages 4000] [--forks 300]
Output: microseconds per page, milliseconds per fork, seconds of CPU per
spin loop. docs/benchmarks.md (section 1) quotes a run on the benchmark
machine.
"""

import argparse
import mmap
import os
import subprocess
import sys
import time

PAGE = mmap.PAGESIZE


def child_cpu(fn):
    """CPU seconds a forked child spends (user + system), fn included."""
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

    empty = min(child_cpu(lambda: None) for _ in range(3))
    for name, fn in (("read", read), ("cow", cow), ("fresh", fresh)):
        best = min(child_cpu(fn) for _ in range(3))
        print(f"{name:6s} {max(best - empty, 0) / pages * 1e6:8.2f} µs/page  ({pages} pages, best of 3, less an empty child)")
    buf.close()


def workload(name, n, pages):
    """Run one workload in this process; print its figures as numbers."""
    if name == "fork":
        child = 0.0
        t0 = time.process_time()
        for _ in range(n):
            child += child_cpu(lambda: None)
        print("%.3f %.3f" % (child / n * 1e3, (time.process_time() - t0) / n * 1e3))
    elif name == "faults":
        t0 = time.process_time()
        for _ in range(5):
            m = mmap.mmap(-1, pages * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            for i in range(pages):
                m[i * PAGE] = 1
            m.close()
        print("%.3f" % ((time.process_time() - t0) / (5 * pages) * 1e6))
    else:
        t0 = time.process_time()
        x = 0
        for i in range(20_000_000):
            x += i
        print("%.3f" % (time.process_time() - t0))


def run_copies(name, copies, a):
    cmd = [sys.executable, "-S", os.path.abspath(__file__), "--only", name, "--forks", str(a.forks), "--pages", str(a.pages)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    return [p.communicate()[0].split() for p in procs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=4000)
    ap.add_argument("--forks", type=int, default=300)
    ap.add_argument("--only", choices=("fork", "faults", "spin"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.only:
        workload(a.only, a.forks, a.pages)
        return
    per_page(a.pages)
    unit = {"fork": "ms CPU per fork + exit (child, parent)", "faults": "µs per fresh page", "spin": "s CPU per loop"}
    for name in ("fork", "faults", "spin"):
        alone = run_copies(name, 1, a)[0]
        both = run_copies(name, 2, a)
        print(f"{name:6s} alone {'/'.join(alone)}; two at once {' and '.join('/'.join(x) for x in both)}  ({unit[name]})")


if __name__ == "__main__":
    main()
