#!/usr/bin/env python3
# thread_cpu_sampler.py PID: where a serve_http process's CPU went, by thread
# name, split into user and kernel time, with context switches: what
# serve_http's own "front us/req" (one number per request) does not say.
# Samples /proc/PID/task/*/{stat,status} (and its child processes') every 50 ms until PID exits; prints,
# per thread name, user and system CPU seconds and context switches (last
# sample of each thread, summed by name).
import os, sys, time
pid = sys.argv[1]
last = {}
tick = os.sysconf("SC_CLK_TCK")
def alive():
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"  # a zombie has no threads left to read


while alive():
    # The process and its descendants (under `timeout`; the gRPC load clients
    # are child processes of serve_http): the first that is not `timeout` is
    # the server, the others are named child:THREAD.
    tree, server = [pid], None
    for process in tree:
        try:
            tree += open(f"/proc/{process}/task/{process}/children").read().split()
            if server is None and open(f"/proc/{process}/comm").read().strip() != "timeout":
                server = process
        except OSError:
            pass
    for process in tree:
      try:
        for tid in os.listdir(f"/proc/{process}/task"):
            try:
                stat = open(f"/proc/{process}/task/{tid}/stat").read()
                status = open(f"/proc/{process}/task/{tid}/status").read()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            if process != server:
                comm = "child:" + comm
            fields = stat[stat.rindex(")") + 2:].split()
            utime, stime = int(fields[11]) / tick, int(fields[12]) / tick
            vol = nonvol = 0
            for line in status.splitlines():
                if line.startswith("voluntary_ctxt_switches"): vol = int(line.split()[1])
                if line.startswith("nonvoluntary_ctxt_switches"): nonvol = int(line.split()[1])
            last[tid] = (comm, utime, stime, vol, nonvol)
      except OSError:
        pass
    time.sleep(0.05)
by = {}
for comm, u, s, v, n in last.values():
    a = by.setdefault(comm, [0, 0, 0, 0, 0])
    a[0] += 1; a[1] += u; a[2] += s; a[3] += v; a[4] += n
print(f"{'thread':16} {'n':>4} {'user s':>8} {'sys s':>8} {'vol cs':>10} {'invol cs':>10}")
for comm, (k, u, s, v, n) in sorted(by.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
    print(f"{comm:16} {k:4d} {u:8.2f} {s:8.2f} {v:10d} {n:10d}")
