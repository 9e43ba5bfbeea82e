"""The pottery driver: pottery's Redlock (PyPI) over five redis-py clients
shared by every client thread, one Redlock object per thread, as a threaded
application would use it.

Speaks the driver protocol of bench/src/spec.rs: a JSON spec as the only
argument, one JSON report line on stdout. Percentiles, Jain and the hot-key
tracker follow bench/src/stats.rs; keep them in step.
"""

import json
import logging
import os
import resource
import sys
import threading
import time
from importlib.metadata import version

from redis import Redis
from pottery import Redlock

from bench_stats import ms, percentiles

# pottery logs every Redis error with a traceback; the report counts them.
logging.getLogger("pottery").setLevel(logging.CRITICAL)


class TunedRedlock(Redlock):
    """Tuned for a hot key: retry after a random 0..10 ms, not 0..200 ms.
    pottery has no setting for it; a subclass is how a user would tune it."""

    _RETRY_DELAY = 0.01


def own_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main():
    spec = json.loads(sys.argv[1])
    tuned = spec["tuned"]
    lock_class = TunedRedlock if tuned else Redlock
    masters = frozenset(Redis.from_url(url) for url in spec["masters"])
    base = time.monotonic()
    # The driver's own CPU (user + system, every thread) from the warm-up's
    # start, as the Rust drivers' getrusage: the library's cost in the
    # application.
    cpu_start = own_cpu_seconds()
    # Tells the orchestrator when the warm-up started (it times faults by it).
    sys.stderr.write("ready\n")
    sys.stderr.flush()
    start = base + spec["warmup_ms"] / 1000
    end = start + spec["duration_ms"] / 1000

    def in_window(t):
        return start <= t <= end

    hot_lock = threading.Lock()
    hot = {"holders": 0, "release_started": None, "releaser": None, "handoffs": [], "handoffs_other": [],
           "grants": [], "overlaps": 0}

    def granted(t, client):
        with hot_lock:
            if hot["holders"] > 0:
                hot["overlaps"] += 1
            hot["holders"] += 1
            if hot["release_started"] is not None:
                if in_window(t):
                    hot["handoffs"].append(ms(t - hot["release_started"]))
                    if hot["releaser"] != client:
                        hot["handoffs_other"].append(ms(t - hot["release_started"]))
                hot["release_started"] = None
            if in_window(t):
                hot["grants"].append(t)

    def releasing(t, client):
        with hot_lock:
            hot["holders"] = max(0, hot["holders"] - 1)
            hot["release_started"] = t
            hot["releaser"] = client

    is_hot = spec["keys"] == "hot"
    logs = [None] * spec["clients"]
    waiting = [None] * spec["clients"]

    def client(index):
        resource = f"{spec['resource_prefix']}-hot" if is_hot else f"{spec['resource_prefix']}-c{index}"
        lock = lock_class(key=resource, masters=masters, auto_release_time=spec["ttl_ms"] / 1000)
        log = {"acquire": [], "cycle": [], "grants_in_window": 0, "grants_total": 0, "cycles": 0,
               "timeouts": 0, "errors": 0, "error_sample": None, "max_wait": 0.0}

        def error(message):
            log["errors"] += 1
            if log["error_sample"] is None:
                log["error_sample"] = message

        while time.monotonic() < end:
            began = time.monotonic()
            waiting[index] = began
            try:
                ok = lock.acquire(blocking=True, timeout=max(end - began, 0.001))
                failure = None
            except Exception as e:  # pottery raises on too many Redis errors
                ok, failure = False, f"acquire: {type(e).__name__}: {e}"
            at = time.monotonic()
            waiting[index] = None
            if at >= start and began < end:
                log["max_wait"] = max(log["max_wait"], ms(min(at, end) - began))
            if ok:
                log["grants_total"] += 1
                if is_hot:
                    granted(at, index)
                if in_window(at):
                    log["grants_in_window"] += 1
                    log["acquire"].append(ms(at - began))
                if is_hot:
                    releasing(time.monotonic(), index)
                try:
                    lock.release()
                    done = time.monotonic()
                    if in_window(done):
                        log["cycles"] += 1
                        log["cycle"].append(ms(done - began))
                except Exception as e:
                    error(f"release: {type(e).__name__}: {e}")
            elif failure is not None:
                error(failure)
                time.sleep(0.01)
            else:
                # The deadline is the window's end: this client is done.
                log["timeouts"] += 1
                break
        logs[index] = log

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(spec["clients"])]
    for t in threads:
        t.start()
    grace = end + 3
    for t in threads:
        t.join(max(0.0, grace - time.monotonic()))
    stuck = sum(1 for t in threads if t.is_alive())
    driver_cpu_s = max(0.0, own_cpu_seconds() - cpu_start)

    report = {
        "peer": spec["peer"],
        "library": f"pottery {version('pottery')} (redis-py {version('redis')}, "
                   f"python {sys.version.split()[0]}, threads)",
        "settings": ("tuned: retry after rand(0..10ms) (subclass with _RETRY_DELAY = 0.01), no limit" if tuned
                     else "defaults: retry after rand(0..200ms), acquire(timeout=window end)"),
        "clients": spec["clients"],
        "window_s": spec["duration_ms"] / 1000,
        "cycles": 0, "grants_total": 0, "per_client_grants": [], "max_wait_ms": 0.0,
        "overlaps": 0, "timeouts": 0, "errors": 0, "error_sample": None, "stuck": stuck,
        "driver_cpu_s": driver_cpu_s,
    }
    acquire, cycle = [], []
    for i, log in enumerate(logs):
        if log is None or threads[i].is_alive():
            continue
        acquire += log["acquire"]
        cycle += log["cycle"]
        report["cycles"] += log["cycles"]
        report["grants_total"] += log["grants_total"]
        report["per_client_grants"].append(log["grants_in_window"])
        report["timeouts"] += log["timeouts"]
        report["errors"] += log["errors"]
        report["max_wait_ms"] = max(report["max_wait_ms"], log["max_wait"])
        if report["error_sample"] is None:
            report["error_sample"] = log["error_sample"]
    now = time.monotonic()
    for since in waiting:
        if since is not None:
            report["max_wait_ms"] = max(report["max_wait_ms"], ms(max(0.0, min(now, end) - since)))
    report["acquire_ms"] = percentiles(acquire)
    report["cycle_ms"] = percentiles(cycle)
    if is_hot:
        with hot_lock:
            report["handoff_ms"] = percentiles(hot["handoffs"])
            report["handoff_other_ms"] = percentiles(hot["handoffs_other"])
            edges = sorted([start, *hot["grants"], end])
            report["longest_gap_ms"] = max((ms(b - a) for a, b in zip(edges, edges[1:])), default=0.0)
            report["overlaps"] = hot["overlaps"]
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    # Threads stuck in a call with no timeout must not keep the driver alive.
    os._exit(0)


if __name__ == "__main__":
    main()
