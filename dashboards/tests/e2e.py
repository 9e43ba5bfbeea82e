"""End to end: the dashboard and the alert rules against a real agent.

The scenario, all on loopback in one temp dir:
  - five redis-server masters, and the agent on them with its leak scanner
    running every second;
  - a Prometheus scraping the agent every second and evaluating a copy of
    alerts.rules.yaml every second, with every `for:` set to 0s so that an
    alert fires at its first evaluation;
  - a workload of a few seconds: clients taking (with a wait), extending and
    releasing locks on two contended resources, one 409 on a third; then,
    between two requests, master r5 is killed (SIGKILL) and the clients go on
    with four masters; then a campaigner is elected and resigns, and another
    is elected and loses its leadership (its election's key deleted on every
    master, as masters losing keys would); then a key without TTL is planted
    under the lock prefix on master r1.

Once the scanner has scanned twice after the planting and Prometheus has
evaluated its rules on that, the checks:
  - every PromQL expression of the dashboard (its variables set to this agent),
    the rules and the Grafana alerts is valid and returns series, judged as
    promql.py does (an alert rule on its compared value), unless NO_SERIES
    lists it with the reason;
  - the planted key shows as redlock_leaked_keys{kind="no_ttl"}, and
    RedlockLeakedKeys fires;
  - redlock_node_up is 0 for r5 and 1 for the others, and RedlockNodeDown
    fires for r5 alone;
  - redlock_node_quarantined_slots (a Redis Cluster master's slots in
    quarantine) is there for every master and 0, as it must be for single
    servers;
  - redlock_leadership_changes_total counts two elected, one resigned and
    one lost, and RedlockLeadershipLost stays quiet for a single loss.

Everything started is stopped and the temp dir removed on every exit path;
the run gives up after RUN_LIMIT_S. Exits 1 when a check fails or the
scenario cannot be set up.

    python e2e.py [--agent target/debug/redlock-agent] [--omit plant] [--omit kill]
"""

import argparse
import http.client
import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

import promql

ROOT = promql.DASHBOARDS.parent
AGENT = ROOT / "target" / "debug" / "redlock-agent"

JOB = "redlock-agent"
MASTERS = [f"r{i}" for i in range(1, 6)]
KILLED = "r5"
PLANTED_ON = "r1"
KEY_PREFIX = "redlock:"
PLANTED_KEY = f"{KEY_PREFIX}e2e-planted"
CONTENDED = ["e2e-a", "e2e-b"]  # the clients' resources
CONFLICT = "e2e-c"  # held once and asked for again: one certain 409
CLIENTS = 4
TTL_MS = 2000
WAIT_MS = 250  # within the clients' hold times, so some acquires run out: 409
HOLD_S = (0.05, 0.15)  # before the extend, and again before the release
RESIGNS = "e2e-resigns"  # an election whose leader resigns
LOSES = "e2e-loses"  # an election whose leader loses its leadership
ELECTION_TTL_MS = 1000  # renewed every third of it: a deleted key is seen fast

# Enough for the quarantine of fresh masters (max_ttl + extra = 6s), a few
# seconds of workload, two scans and two evaluations, on a busy 2-core box.
RUN_LIMIT_S = 60
SCRAPE_INTERVAL = "1s"

# Expressions allowed to return no series in this scenario, by promql.Query
# source, each with the reason. Alert rules are judged on their compared
# value (promql.compared_value), which returns series whether or not the
# alert fires, so a quiet alert needs no entry here; whether it stays quiet
# is checked against FIRING instead.
NO_SERIES: dict[str, str] = {}

# The alerts this scenario makes fire, with the reason; every other alert of
# alerts.rules.yaml must stay quiet.
FIRING = {
    "RedlockLeakedKeys": f"{PLANTED_KEY} has no TTL",
    "RedlockNodeDown": f"{KILLED} was killed",
}


class SetupError(Exception):
    """The scenario could not be brought about; no check was reached."""


class RunLimit(Exception):
    """The whole run took longer than RUN_LIMIT_S."""


def free_port() -> int:
    """A loopback TCP port nobody listens on now (it may be taken before use)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- children ------------------------------------------------------------------

class Children:
    """The processes this run started, each with a log file in `dir`.

    ## Behavior
    - `stop_all` sends SIGTERM, then SIGKILL to any that are still there after
      a few seconds; it is safe to call twice and after `kill`.
    - `check` raises SetupError when a child exited that was not killed on
      purpose, with the end of its log.
    """

    def __init__(self, dir: Path):
        self.dir = dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.killed: set[str] = set()

    def start(self, name: str, argv: list[str]) -> None:
        with open(self.dir / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash would."""
        self.killed.add(name)
        self.procs[name].kill()
        self.procs[name].wait(timeout=5)

    def check(self) -> None:
        for name, proc in self.procs.items():
            if name not in self.killed and proc.poll() is not None:
                raise SetupError(f"{name} exited with {proc.returncode}; its log ends:\n{self.tail(name)}")

    def tail(self, name: str, lines: int = 25) -> str:
        path = self.dir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "".join(f"    {line}\n" for line in text.splitlines()[-lines:])

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(what: str, condition: Callable[[], object], timeout: float, children: Children):
    """Polls `condition` until it returns something true, and returns that.

    A condition that cannot be asked yet (connection refused, no socket file,
    a slow redis-cli) counts as false.

    # Errors
    SetupError after `timeout` seconds, or as soon as a child exits.
    """
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        children.check()
        try:
            result = condition()
            if result:
                return result
        except (OSError, http.client.HTTPException, subprocess.TimeoutExpired) as error:
            last_error = error
        if time.monotonic() >= deadline:
            suffix = f" (last error: {last_error})" if last_error else ""
            raise SetupError(f"{what}: not within {timeout:g}s{suffix}")
        time.sleep(0.1)


# --- masters ---------------------------------------------------------------------

def redis_cli(port: int, *args: str) -> str:
    done = subprocess.run(["redis-cli", "-p", str(port), *args],
                          capture_output=True, text=True, timeout=5, check=False)
    return done.stdout.strip()


def start_masters(children: Children, scratch: Path) -> dict[str, int]:
    """Starts every master; returns their ports once each answers PING."""
    ports = {}
    for name in MASTERS:
        ports[name] = free_port()
        (scratch / name).mkdir()
        children.start(name, [
            "redis-server", "--port", str(ports[name]), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(scratch / name)])
    for name, port in ports.items():
        wait_for(f"master {name} answers PING", lambda: redis_cli(port, "PING") == "PONG", 10, children)
    return ports


# --- the agent -------------------------------------------------------------------

class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 to the agent's Unix socket."""

    def __init__(self, path: Path, timeout: float = 5):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self.path))
        self.sock = sock


def agent_call(sock: Path, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """One request on a fresh connection: (status, JSON answer)."""
    conn = UnixHTTPConnection(sock)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload else {}
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def agent_config(sock: Path, metrics_port: int, ports: dict[str, int]) -> dict:
    return {
        "socket": {"path": str(sock)},
        "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
        "masters": [{"name": name, "url": f"redis://127.0.0.1:{port}"} for name, port in ports.items()],
        "lock": {"key_prefix": KEY_PREFIX, "default_ttl": "2s", "max_ttl": "5s", "node_timeout": "100ms"},
        "health": {"interval": "200ms"},
        "delayed_restart": {"enabled": True, "extra": "1s"},
        "leak_scan": {"interval": "1s", "count": 100, "keys_per_second": 10000, "repair": "none"},
        "shutdown": {"grace": "1s"},
    }


def node_states(sock: Path) -> dict[str, str]:
    status, body = agent_call(sock, "GET", "/v1/nodes")
    if status != 200:
        return {}
    return {node["name"]: node["state"] for node in body["nodes"]}


# --- Prometheus ------------------------------------------------------------------

def rules_firing_at_once(source: Path, target: Path) -> None:
    """Copies the rule file with every `for:` set to 0s."""
    doc = yaml.safe_load(source.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    target.write_text(yaml.safe_dump(doc, sort_keys=False))


def prometheus_config(rules: Path, agent_target: str) -> dict:
    return {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
        },
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [agent_target]}]}],
    }


class Prometheus:
    """Read-only client of the Prometheus HTTP API at `url`."""

    def __init__(self, url: str):
        self.url = url

    def get(self, path: str) -> bytes:
        """The body of a 200 answer to GET `path`.

        # Errors
        OSError when Prometheus cannot be reached, HTTPException on another status.
        """
        conn = http.client.HTTPConnection(self.url.removeprefix("http://"), timeout=10)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise http.client.HTTPException(f"GET {path}: {response.status} {body[:200]!r}")
            return body
        finally:
            conn.close()

    def ready(self) -> bool:
        return bool(self.get("/-/ready"))

    def query(self, expr: str) -> list[dict]:
        """The instant vector of `expr` now.

        # Errors
        SetupError when Prometheus refuses `expr`.
        """
        answer = promql._ask(self.url, expr)
        if answer["status"] != "success":
            raise SetupError(f"prometheus refused {expr!r}: {answer.get('error')}")
        return answer["data"]["result"]

    def values(self, expr: str, label: str) -> dict[str, float]:
        """The value of each series of `expr`, by `label`."""
        return {s["metric"].get(label, ""): float(s["value"][1]) for s in self.query(expr)}

    def firing(self) -> list[dict]:
        """Labels of every firing alert."""
        alerts = json.loads(self.get("/api/v1/alerts"))["data"]["alerts"]
        return [a["labels"] for a in alerts if a["state"] == "firing"]

    def last_evaluation(self) -> float:
        """Unix time of the oldest last evaluation among the rule groups."""
        groups = json.loads(self.get("/api/v1/rules"))["data"]["groups"]
        if not groups:
            return 0.0
        return min(datetime.fromisoformat(g["lastEvaluation"]).timestamp() for g in groups)


# --- workload --------------------------------------------------------------------

class Workload:
    """CLIENTS threads taking, extending and releasing locks on CONTENDED, in phases.

    Between phases no client holds a lock or has a request in flight, so a
    master killed between two phases cannot take a granted lock with it
    (a lock granted on exactly a quorum that includes the killed master is
    lost, correctly, and that is not what this scenario is about).
    `counts` and `unexpected` add up over every phase. Answers other than 200
    and 409 `taken` go to `unexpected`; a client whose request fails at the
    transport level stops and says so there.
    """

    def __init__(self, sock: Path):
        self.sock = sock
        self.counts: Counter[str] = Counter()
        self.unexpected: list[str] = []
        self._lock = threading.Lock()
        self._phase = ""

    def phase(self, name: str, locks: int, timeout: float, children: Children) -> None:
        """Runs the clients until they have taken `locks` locks in this phase.

        # Errors
        SetupError (from wait_for) when that takes longer than `timeout`.
        """
        self._phase = name
        stopping = threading.Event()
        threads = [threading.Thread(target=self._client, args=(n, stopping), daemon=True)
                   for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        try:
            wait_for(f"{locks} locks taken {name}", lambda: self.count(f"acquired {name}") >= locks,
                     timeout, children)
        finally:
            stopping.set()
            for thread in threads:
                thread.join(timeout=10)  # at most one cycle: the hold times and three requests

    def count(self, what: str) -> int:
        with self._lock:
            return self.counts[what]

    def _add(self, *what: str) -> None:
        with self._lock:
            self.counts.update(what)

    def _odd(self, what: str) -> None:
        with self._lock:
            self.unexpected.append(what)

    def _client(self, n: int, stopping: threading.Event) -> None:
        rng = random.Random(n)
        owner = f"e2e-client-{n}"
        try:
            while not stopping.is_set():
                self._cycle(rng, owner)
        except (OSError, http.client.HTTPException) as error:
            self._odd(f"{owner} stopped: {error}")

    def _cycle(self, rng: random.Random, owner: str) -> None:
        resource = rng.choice(CONTENDED)
        base = f"/v1/locks/{resource}"
        status, body = agent_call(self.sock, "POST", f"{base}/acquire",
                                  {"ttl_ms": TTL_MS, "wait_ms": WAIT_MS, "owner": owner})
        if status == 409 and body.get("error", {}).get("code") == "taken":
            self._add("taken")
            return
        if status != 200:
            self._odd(f"acquire {resource}: {status} {json.dumps(body)}")
            return
        self._add("acquired", f"acquired {self._phase}")
        token = body["token"]
        time.sleep(rng.uniform(*HOLD_S))  # holding the lock: the point of a workload
        status, body = agent_call(self.sock, "POST", f"{base}/extend", {"token": token, "ttl_ms": TTL_MS})
        if status == 200:
            self._add("extended")
        else:
            self._odd(f"extend {resource}: {status} {json.dumps(body)}")
        time.sleep(rng.uniform(*HOLD_S))
        status, body = agent_call(self.sock, "POST", f"{base}/release", {"token": token})
        if status == 200 and body.get("released"):
            self._add("released")
        else:
            self._odd(f"release {resource}: {status} {json.dumps(body)}")


class Campaign:
    """One campaign for an election, on its own connection; closing it resigns.

    ## Behavior
    - `until` reads the NDJSON stream until an event of the kind asked for;
      SetupError when the stream ends first or says `lost` unasked, OSError
      when the agent sends nothing for the connection's timeout (a leader is
      told `renewed` every third of its TTL).
    """

    def __init__(self, sock: Path, election: str):
        self.election = election
        self.conn = UnixHTTPConnection(sock)
        body = json.dumps({"ttl_ms": ELECTION_TTL_MS, "owner": "e2e-campaigner"}).encode()
        self.conn.request("POST", f"/v1/elections/{election}/campaign", body=body,
                          headers={"Content-Type": "application/json"})
        self.response = self.conn.getresponse()
        if self.response.status != 200:
            answer = self.response.read()[:200]
            self.conn.close()
            raise SetupError(f"campaign {election}: {self.response.status} {answer!r}")

    def until(self, kind: str) -> dict:
        while True:
            line = self.response.readline()
            if not line:
                raise SetupError(f"campaign {self.election}: the stream ended before {kind!r}")
            event = json.loads(line)
            if event.get("event") == kind:
                return event
            if event.get("event") == "lost":
                raise SetupError(f"campaign {self.election}: lost before {kind!r}: {json.dumps(event)}")

    def close(self) -> None:
        self.conn.close()


def conflict(sock: Path) -> int:
    """Holds CONFLICT and asks for it again without waiting; the second answer's status."""
    base = f"/v1/locks/{CONFLICT}"
    status, body = agent_call(sock, "POST", f"{base}/acquire", {"ttl_ms": TTL_MS, "owner": "e2e-holder"})
    if status != 200:
        raise SetupError(f"acquire {CONFLICT}: {status} {json.dumps(body)}")
    try:
        second, _ = agent_call(sock, "POST", f"{base}/acquire", {"ttl_ms": TTL_MS, "owner": "e2e-contender"})
    finally:
        agent_call(sock, "POST", f"{base}/release", {"token": body["token"]})
    return second


# --- checks ----------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


def expression_checks(outcomes: list[promql.Outcome]) -> list[Check]:
    """Every expression valid; each returns series unless NO_SERIES says why not."""
    invalid = [o for o in outcomes if o.error]
    empty = [o for o in outcomes if not o.error and o.series == 0 and o.query.source not in NO_SERIES]
    # An entry that matches nothing would hide nothing; it is a typo or left over.
    stale = sorted(set(NO_SERIES) - {o.query.source for o in outcomes})
    for o in outcomes:
        if o.query.source in NO_SERIES and o.series:
            print(f"e2e: note: {o.query.source} returned {o.series} series though NO_SERIES allows none")
    return [
        Check("every expression is valid", not invalid,
              "".join(f"\n    {o.query.source}: {o.error}\n      {o.query.expr}" for o in invalid)),
        Check("every expression returns series (NO_SERIES aside)", not empty and not stale,
              "".join(f"\n    {o.query.source}\n      {o.query.probe}" for o in empty)
              + "".join(f"\n    NO_SERIES names no expression: {source}" for source in stale)),
    ]


def describe(labels: dict) -> str:
    extra = {k: v for k, v in sorted(labels.items()) if k not in ("alertname", "job", "severity")}
    return labels["alertname"] + "{" + ", ".join(f"{k}={v}" for k, v in extra.items()) + "}"


# --- the run ---------------------------------------------------------------------

@dataclass(frozen=True)
class Stack:
    """The masters, the agent and Prometheus, running."""

    ports: dict[str, int]  # master name -> port
    sock: Path
    agent_target: str  # the agent's metrics address: Prometheus' `instance` label
    prom: Prometheus


def start_stack(children: Children, scratch: Path, agent: Path) -> Stack:
    """Starts everything; returns once Prometheus is ready and every master is usable."""
    ports = start_masters(children, scratch)

    sock = scratch / "agent.sock"
    metrics_port = free_port()
    agent_target = f"127.0.0.1:{metrics_port}"
    config = scratch / "agent.yaml"
    config.write_text(yaml.safe_dump(agent_config(sock, metrics_port, ports), sort_keys=False))
    children.start("agent", [str(agent), "--config", str(config)])

    rules = scratch / "alerts.rules.yaml"
    rules_firing_at_once(promql.RULES, rules)
    prometheus_yml = scratch / "prometheus.yml"
    prometheus_yml.write_text(yaml.safe_dump(prometheus_config(rules, agent_target), sort_keys=False))
    prometheus_port = free_port()
    children.start("prometheus", [
        "prometheus", f"--config.file={prometheus_yml}", f"--storage.tsdb.path={scratch / 'data'}",
        f"--web.listen-address=127.0.0.1:{prometheus_port}"])
    prom = Prometheus(f"http://127.0.0.1:{prometheus_port}")
    print(f"e2e: masters on ports {', '.join(str(p) for p in ports.values())}; "
          f"agent metrics on {agent_target}; prometheus on {prom.url}")

    wait_for("prometheus is ready", prom.ready, 20, children)
    # Fresh masters are quarantined for max_ttl + extra (6s) once the agent meets them.
    wait_for("every master is usable", lambda: node_states(sock) == {name: "up" for name in MASTERS},
             20, children)
    return Stack(ports, sock, agent_target, prom)


def elections(stack: Stack, children: Children) -> str:
    """One leadership resigned, then one lost; the reason the agent gave for the loss."""
    campaign = Campaign(stack.sock, RESIGNS)
    try:
        campaign.until("elected")
    finally:
        campaign.close()  # resigns

    campaign = Campaign(stack.sock, LOSES)
    try:
        campaign.until("elected")
        # The election's lock, gone from every master that is still up: the
        # next renewal finds no quorum holding the token, and the agent says
        # lost, as it would after masters restarted or were flushed.
        key = f"{KEY_PREFIX}{LOSES} election"
        alive = [port for name, port in stack.ports.items() if name not in children.killed]
        deleted = sum(redis_cli(port, "DEL", key) == "1" for port in alive)
        if deleted < len(MASTERS) // 2 + 1:
            raise SetupError(f"{key!r} deleted on {deleted} masters only, fewer than a quorum")
        return campaign.until("lost").get("reason", "?")
    finally:
        campaign.close()


def drive(stack: Stack, children: Children, omit: set[str]) -> list[Check]:
    """The workload, the kill and the planting; checks that the workload went as meant."""
    held_twice = conflict(stack.sock)
    workload = Workload(stack.sock)
    workload.phase("before the kill", 20, 15, children)
    if "kill" not in omit:
        children.kill(KILLED)
        wait_for(f"the agent sees {KILLED} down", lambda: node_states(stack.sock).get(KILLED) == "down",
                 10, children)
    workload.phase("after the kill", 10, 15, children)
    lost_reason = elections(stack, children)
    counts = workload.counts
    print(f"e2e: workload: {CLIENTS} clients on {len(CONTENDED)} resources: "
          f"{counts['acquired']} locks taken ({counts['acquired after the kill']} after the kill), "
          f"{counts['taken']} answered 409 taken, {counts['extended']} extended, {counts['released']} released, "
          f"{len(workload.unexpected)} unexpected answers; "
          f"{RESIGNS} elected and resigned, {LOSES} elected and lost ({lost_reason})")

    if "plant" not in omit:
        port = stack.ports[PLANTED_ON]
        # A token the agent wrote for this very key (the scanner counts only
        # values whose check value binds them to their key), then left on
        # one master without TTL, as a leak would leave it.
        resource = PLANTED_KEY.removeprefix(KEY_PREFIX)
        status, body = agent_call(stack.sock, "POST", f"/v1/locks/{resource}/acquire", {"owner": "planted"})
        if status != 200:
            raise SetupError(f"acquire {resource}: {status} {json.dumps(body)}")
        redis_cli(port, "SET", PLANTED_KEY, body["token"])
        if redis_cli(port, "TTL", PLANTED_KEY) != "-1":
            raise SetupError(f"{PLANTED_KEY} on {PLANTED_ON} is not a key without TTL")
    print(f"e2e: {'killed ' + KILLED if 'kill' not in omit else 'killed nothing'}; "
          f"{'planted ' + PLANTED_KEY + ' without TTL on ' + PLANTED_ON if 'plant' not in omit else 'planted nothing'}")
    return [
        Check("workload: a held resource answers 409 taken", held_twice == 409, f"got {held_twice}"),
        Check("workload: locks taken, extended and released, also after the kill",
              all(counts[k] for k in ("acquired before the kill", "acquired after the kill", "extended", "released")),
              str(dict(counts))),
        Check("workload: only 200 and 409 taken answered", not workload.unexpected,
              "".join(f"\n    {u}" for u in workload.unexpected[:10])),
    ]


def settle(prom: Prometheus, since: float, children: Children) -> None:
    """Returns once the scanner has scanned twice after `since`, Prometheus
    has scraped that, and the rules have been evaluated after the scrape.

    A scan ending after `since` may have started before it; the next one
    (scans follow each other) started after.
    """
    scans_after: set[float] = set()

    def two_scans_after() -> bool:
        last = prom.values(f'redlock_leak_scan_last_success_timestamp_seconds{{job="{JOB}"}}', "job")
        scans_after.update(v for v in last.values() if v > since)
        return len(scans_after) >= 2

    wait_for("two leak scans after the planting, scraped", two_scans_after, 20, children)
    seen = time.time()
    wait_for("the rules evaluated after that", lambda: prom.last_evaluation() > seen, 10, children)


def observe(stack: Stack) -> list[Check]:
    """Every expression through promql.py, then the leak and the kill as Prometheus sees them."""
    prom = stack.prom
    variables = {"job": JOB, "instance": stack.agent_target}
    outcomes = promql.run(prom.url, promql.all_queries(variables))
    print(f"e2e: {len(outcomes)} expressions evaluated (job={JOB}, instance={stack.agent_target}): "
          f"{sum(1 for o in outcomes if not o.error and o.series)} returned series, "
          f"{sum(1 for o in outcomes if o.error)} invalid")

    leaked = prom.values(f'redlock_leaked_keys{{job="{JOB}", kind="no_ttl"}}', "node")
    node_up = prom.values(f'redlock_node_up{{job="{JOB}"}}', "node")
    slots_out = prom.values(f'redlock_node_quarantined_slots{{job="{JOB}"}}', "node")
    # By event, every reason added up (one series per event and reason).
    leadership = prom.values(f'sum by (event) (redlock_leadership_changes_total{{job="{JOB}"}})', "event")
    resigned = prom.values(f'redlock_leadership_changes_total{{job="{JOB}", event="resigned"}}', "reason")
    firing = prom.firing()
    print(f"e2e: alerts firing: {', '.join(sorted(describe(a) for a in firing)) or 'none'}")
    print(f"e2e: leaked keys (no_ttl): {sum(leaked.values()):g} "
          f"({', '.join(f'{n}={v:g}' for n, v in sorted(leaked.items()))})")

    down_alerts = {a.get("node") for a in firing if a["alertname"] == "RedlockNodeDown"}
    unexpected_alerts = [a for a in firing if a["alertname"] not in FIRING]
    expected_up = {name: 0.0 if name == KILLED else 1.0 for name in MASTERS}
    return [
        *expression_checks(outcomes),
        Check('redlock_leaked_keys{kind="no_ttl"} sums to at least 1', sum(leaked.values()) >= 1,
              f"by node: {leaked}"),
        Check("RedlockLeakedKeys is firing", any(a["alertname"] == "RedlockLeakedKeys" for a in firing),
              f"firing: {sorted(describe(a) for a in firing)}"),
        Check(f"RedlockNodeDown is firing for {KILLED} alone", down_alerts == {KILLED},
              f"firing for: {sorted(map(str, down_alerts))}"),
        Check(f"redlock_node_up is 0 for {KILLED}, 1 for the others", node_up == expected_up,
              f"got {node_up}"),
        Check("redlock_node_quarantined_slots is 0 for every master (single servers)",
              slots_out == {name: 0.0 for name in MASTERS}, f"got {slots_out}"),
        Check("redlock_leadership_changes_total: 2 elected, 1 resigned, 1 lost",
              leadership == {"elected": 2.0, "resigned": 1.0, "lost": 1.0}, f"got {leadership}"),
        Check('the resignation is counted as resigned{reason="closed"}',
              resigned == {"closed": 1.0, "max_hold": 0.0, "shutdown": 0.0}, f"got {resigned}"),
        Check(f"no alert fires but {', '.join(FIRING)}", not unexpected_alerts,
              f"also firing: {sorted(describe(a) for a in unexpected_alerts)}"),
    ]


def scenario(children: Children, scratch: Path, agent: Path, omit: set[str]) -> list[Check]:
    stack = start_stack(children, scratch, agent)
    checks = drive(stack, children, omit)
    settle(stack.prom, time.time(), children)
    return checks + observe(stack)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent", type=Path, default=AGENT, help=f"agent binary (default: {AGENT})")
    parser.add_argument("--omit", action="append", choices=["plant", "kill"], default=[],
                        help="leave a step out of the scenario, to see the checks that depend on it fail")
    args = parser.parse_args(argv)
    if not args.agent.is_file():
        print(f"e2e: no agent binary at {args.agent}; build it with: cargo build -p redlock-agent")
        return 1
    missing = [tool for tool in ("redis-server", "redis-cli", "prometheus") if not shutil.which(tool)]
    if missing:
        print(f"e2e: not on PATH: {', '.join(missing)} (Debian: apt-get install redis-server prometheus)")
        return 1

    def give_up(signum, frame):
        raise RunLimit(f"the run took over {RUN_LIMIT_S}s")

    signal.signal(signal.SIGALRM, give_up)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    signal.alarm(RUN_LIMIT_S)
    scratch = Path(tempfile.mkdtemp(prefix="redlock-e2e-"))
    children = Children(scratch)
    try:
        try:
            checks = scenario(children, scratch, args.agent, set(args.omit))
        except (SetupError, RunLimit) as error:
            checks = [Check("the scenario plays out", False, str(error))]
        for check in checks:
            print(f"{'ok  ' if check.ok else 'FAIL'}  {check.name}{'' if check.ok else ': ' + check.detail}")
        failed = [c for c in checks if not c.ok]
        if failed:
            for name in ("agent", "prometheus"):
                if name in children.procs:
                    print(f"e2e: the {name} log ends:\n{children.tail(name)}", end="")
        print(f"e2e: {len(checks) - len(failed)} passed, {len(failed)} failed")
        return 1 if failed else 0
    finally:
        signal.alarm(0)
        children.stop_all()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
