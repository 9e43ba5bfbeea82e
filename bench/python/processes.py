"""W7's driver, the way most users run: one client per process, each its
own Python interpreter looping acquire + release on its own resource.

- peer "agent": the repository's standard-library client,
  clients/python/src/redlock_client, imported as it is from the directory
  the spec names (`python_client`); run under `python3 -I`, so nothing but
  the standard library, that package and bench_stats.py beside this one can
  be imported. The client opens a
  connection on the agent's socket per call.
- peer "pottery": pottery's Redlock over five redis-py clients of the
  process's own, as in driver.py, under the benchmark's venv.

Speaks the driver protocol of bench/src/spec.rs: a JSON spec as the only
argument, one JSON report line on stdout. The parent starts `clients`
copies of this file as workers (`--worker INDEX`), waits until each says
it is ready (imported, connected), then gives them all the same window on
CLOCK_MONOTONIC (shared by every process on Linux) and collects each
worker's log. Percentiles follow bench/src/stats.rs, as driver.py does;
keep them in step.
"""

import json
import os
import subprocess
import sys
import time

# Under `python3 -I` the script's own directory is not on the path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_stats import ms, percentiles  # noqa: E402

# Seconds each worker may take to import and connect.
STARTUP_S = 60.0
# Seconds after the window's end before a worker counts as stuck: longer
# than driver.py's 3 s, as 64 interpreters on a small machine may take a
# while to finish their last call and write their log.
GRACE_S = 10.0


def agent_lock(spec, resource, index):
    """acquire(timeout_s) -> token or None (waited to the deadline),
    release(token); through the standard-library client."""
    sys.path.insert(0, spec["python_client"])
    from redlock_client import Client, Taken

    client = Client(spec["socket"])

    def acquire(timeout_s):
        try:
            grant = client.acquire(resource, ttl_ms=spec["ttl_ms"], wait_ms=max(1, int(timeout_s * 1000)),
                                   owner="w7-%d" % index)
        except Taken:
            return None
        return grant.token

    def release(token):
        if not client.release(resource, token):
            raise RuntimeError("released=false: the lock had expired")

    return acquire, release


def pottery_lock(spec, resource, _index):
    import logging

    from redis import Redis
    from pottery import Redlock

    # pottery logs every Redis error with a traceback; the report counts them.
    logging.getLogger("pottery").setLevel(logging.CRITICAL)
    masters = frozenset(Redis.from_url(url) for url in spec["masters"])
    for master in masters:
        master.ping()  # connect before the window, as the warm-up would
    lock = Redlock(key=resource, masters=masters, auto_release_time=spec["ttl_ms"] / 1000)

    def acquire(timeout_s):
        return object() if lock.acquire(blocking=True, timeout=timeout_s) else None

    def release(_token):
        lock.release()

    return acquire, release


def worker(spec, index):
    resource = "%s-c%d" % (spec["resource_prefix"], index)
    setup = agent_lock if spec["peer"] == "agent" else pottery_lock
    acquire, release = setup(spec, resource, index)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    window = json.loads(sys.stdin.readline())
    start, end = window["start"], window["end"]
    log = {"acquire": [], "cycle": [], "grants_in_window": 0, "grants_total": 0, "cycles": 0,
           "timeouts": 0, "errors": 0, "error_sample": None, "max_wait": 0.0}

    def error(message):
        log["errors"] += 1
        if log["error_sample"] is None:
            log["error_sample"] = message

    # From the warm-up's start, as driver.py: only the window is counted.
    while time.monotonic() < end:
        began = time.monotonic()
        try:
            token = acquire(max(end - began, 0.001))
            failure = None
        except Exception as e:
            token, failure = None, "acquire: %s: %s" % (type(e).__name__, e)
        at = time.monotonic()
        if at >= start and began < end:
            log["max_wait"] = max(log["max_wait"], ms(min(at, end) - began))
        if token is not None:
            log["grants_total"] += 1
            if start <= at <= end:
                log["grants_in_window"] += 1
                log["acquire"].append(ms(at - began))
            try:
                release(token)
                done = time.monotonic()
                if start <= done <= end:
                    log["cycles"] += 1
                    log["cycle"].append(ms(done - began))
            except Exception as e:
                error("release: %s: %s" % (type(e).__name__, e))
        elif failure is not None:
            error(failure)
            time.sleep(0.01)
        else:
            log["timeouts"] += 1
            break
    sys.stdout.write(json.dumps(log) + "\n")
    sys.stdout.flush()


def library(spec, n):
    python = "python %s" % sys.version.split()[0]
    if spec["peer"] == "agent":
        return ("redlock-agent, through clients/python/src/redlock_client (standard library only, "
                "http.client, a connection per call; %s -I), %d processes" % (python, n))
    from importlib.metadata import version

    return "pottery %s (redis-py %s, %s), %d processes, each with its own five clients" % (
        version("pottery"), version("redis"), python, n)


def main():
    spec = json.loads(sys.argv[1])
    if len(sys.argv) == 4 and sys.argv[2] == "--worker":
        worker(spec, int(sys.argv[3]))
        return
    n = spec["clients"]
    flags = [f for f in ("-I",) if sys.flags.isolated]
    workers = [
        subprocess.Popen([sys.executable, *flags, os.path.abspath(__file__), sys.argv[1], "--worker", str(i)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for i in range(n)
    ]
    deadline = time.monotonic() + STARTUP_S
    for w in workers:
        # A worker that failed to start closes its stdout: "" here, and its
        # traceback on our stderr.
        if w.stdout.readline().strip() != "ready" or time.monotonic() > deadline:
            for other in workers:
                other.kill()
            sys.stderr.write("a worker did not start (exit %s)\n" % w.poll())
            sys.exit(1)
    base = time.monotonic()
    start = base + spec["warmup_ms"] / 1000
    end = start + spec["duration_ms"] / 1000
    # Tells the orchestrator when the warm-up started.
    sys.stderr.write("ready\n")
    sys.stderr.flush()
    window = json.dumps({"start": start, "end": end}) + "\n"
    for w in workers:
        w.stdin.write(window)
        w.stdin.flush()
    logs, stuck = [], 0
    for w in workers:
        try:
            out, _ = w.communicate(timeout=max(0.1, end + GRACE_S - time.monotonic()))
            lines = [line for line in out.splitlines() if line.startswith("{")]
            logs.append(json.loads(lines[-1]) if lines else None)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()
            stuck += 1

    report = {
        "peer": spec["peer"],
        "library": library(spec, n),
        "settings": ("defaults: wait_ms to the window's end" if spec["peer"] == "agent"
                     else "defaults: retry after rand(0..200ms), acquire(timeout=window end)"),
        "clients": n,
        "window_s": spec["duration_ms"] / 1000,
        "cycles": 0, "grants_total": 0, "per_client_grants": [], "max_wait_ms": 0.0,
        "overlaps": 0, "timeouts": 0, "errors": 0, "error_sample": None, "stuck": stuck,
    }
    acquire, cycle = [], []
    for log in logs:
        if log is None:
            report["errors"] += 1
            report["error_sample"] = report["error_sample"] or "a worker exited without its log"
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
    report["acquire_ms"] = percentiles(acquire)
    report["cycle_ms"] = percentiles(cycle)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
