"""Every PromQL expression in dashboards/, and a run of each against a Prometheus.

Sources: the targets and variable queries of redlock-agent.json, the rules of
alerts.rules.yaml, the data-source queries of grafana-alerts.yaml. Dashboard
variables are substituted ($job, $instance from `variables`; Grafana's own
$__rate_interval and friends with fixed durations); an unknown variable is an
error, so a typo cannot slip through as literal text.

As a CLI, asks <url>/api/v1/query for each expression, lists the ones
Prometheus refuses (exit 1) and counts the ones returning no series (with
--require-series it lists those too and exits 1). For an alert rule written
`<value> > N`, "no series" is judged on <value>: a quiet alert returns nothing
by design.

    python promql.py --url http://127.0.0.1:9090 [--var job=redlock-agent] [--require-series]
"""

import argparse
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import promql_parser
import yaml

DASHBOARDS = Path(__file__).resolve().parent.parent
DASHBOARD = DASHBOARDS / "redlock-agent.json"
RULES = DASHBOARDS / "alerts.rules.yaml"
GRAFANA_ALERTS = DASHBOARDS / "grafana-alerts.yaml"

# Grafana's built-in variables, with values that make a valid query.
GRAFANA_BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__interval_ms": "60000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
# Dashboard variables: match everything unless told otherwise.
DEFAULT_VARIABLES = {"job": ".*", "instance": ".*"}

# $name, ${name}, ${name:format}, [[name]]; names start with a letter or _
# so label_replace's "$1" is left alone.
_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\[\[([A-Za-z_]\w*)\]\]|\$([A-Za-z_]\w*)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.S)
_QUERY_RESULT = re.compile(r"^\s*query_result\((.*)\)\s*$", re.S)
_COMPARISONS = {">", "<", ">=", "<=", "==", "!="}


class UnknownVariable(ValueError):
    """An expression refers to a variable that is neither given nor built in."""


@dataclass(frozen=True)
class Query:
    """One expression, ready to send unless `problem` says otherwise."""

    source: str  # where it was found, for messages
    expr: str
    probe: str  # the part that should return series when the agent runs
    problem: str | None = None  # why it cannot be sent at all


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Replaces every Grafana variable reference in `expr`.

    # Errors
    UnknownVariable for a name in neither `variables` nor GRAFANA_BUILTINS.
    """
    values = {**GRAFANA_BUILTINS, **variables}

    def value(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        if name not in values:
            raise UnknownVariable(f"unknown variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(value, expr)


def compared_value(expr: str) -> str:
    """<value> of `<value> <comparison> <number>`; else `expr` itself."""
    try:
        tree = promql_parser.parse(expr)
    except ValueError:
        return expr  # Prometheus will say what is wrong.
    if (
        isinstance(tree, promql_parser.BinaryExpr)
        and str(tree.op) in _COMPARISONS
        and isinstance(tree.rhs, promql_parser.NumberLiteral)
    ):
        return str(tree.lhs)
    return expr


def _panels(panels: list) -> list:
    """Panels in order, rows' nested panels included."""
    out = []
    for panel in panels:
        out.append(panel)
        out.extend(_panels(panel.get("panels", [])))
    return out


def _dashboard_query(source: str, expr: str, variables: dict[str, str]) -> Query:
    try:
        expr = substitute(expr, variables)
    except UnknownVariable as error:
        return Query(source, expr, expr, problem=str(error))
    return Query(source, expr, expr)


def panel_queries(variables: dict[str, str], path: Path = DASHBOARD) -> list[Query]:
    """Targets of every panel of the dashboard."""
    queries = []
    for panel in _panels(json.loads(path.read_text()).get("panels", [])):
        for target in panel.get("targets", []):
            if "expr" in target:
                source = f"{path.name}: panel {panel.get('id')} {panel.get('title')!r} target {target.get('refId')}"
                queries.append(_dashboard_query(source, target["expr"], variables))
    return queries


def variable_queries(variables: dict[str, str], path: Path = DASHBOARD) -> list[Query]:
    """The PromQL inside label_values(...) and query_result(...) variable queries."""
    queries = []
    for var in json.loads(path.read_text()).get("templating", {}).get("list", []):
        query = var.get("query")
        if var.get("type") != "query" or not isinstance(query, str):
            continue
        match = _LABEL_VALUES.match(query) or _QUERY_RESULT.match(query)
        if match:
            source = f"{path.name}: variable ${var['name']}"
            queries.append(_dashboard_query(source, match.group(1), variables))
    return queries


def rule_queries(path: Path = RULES) -> list[Query]:
    """Expressions of every Prometheus rule."""
    queries = []
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            expr = rule["expr"].strip()
            queries.append(Query(f"{path.name}: {name}", expr, compared_value(expr)))
    return queries


def grafana_queries(path: Path = GRAFANA_ALERTS) -> list[Query]:
    """Data-source queries of every Grafana-managed rule (expressions skipped)."""
    queries = []
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            for data in rule["data"]:
                if data["datasourceUid"] != "__expr__":
                    expr = data["model"]["expr"].strip()
                    source = f"{path.name}: {rule['title']} {data['refId']}"
                    queries.append(Query(source, expr, expr))
    return queries


def all_queries(variables: dict[str, str]) -> list[Query]:
    return (panel_queries(variables) + variable_queries(variables)
            + rule_queries() + grafana_queries())


def _ask(url: str, expr: str) -> dict:
    """The JSON answer of /api/v1/query, error answers included.

    # Errors
    urllib.error.URLError when Prometheus cannot be reached or answers with
    something other than its JSON API.
    """
    body = urllib.parse.urlencode({"query": expr}).encode()
    request = urllib.request.Request(f"{url.rstrip('/')}/api/v1/query", data=body)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        # 400 bad_data (parse) and 422 execution carry a JSON error body.
        if error.code in (400, 422):
            return json.load(error)
        raise


def _series(answer: dict) -> int:
    data = answer["data"]
    if data["resultType"] in ("vector", "matrix"):
        return len(data["result"])
    return 1  # a scalar or a string always has a value


@dataclass(frozen=True)
class Outcome:
    query: Query
    error: str | None  # why the expression is invalid (Prometheus's answer, mostly)
    series: int


def run(url: str, queries: list[Query]) -> list[Outcome]:
    """Sends each query (and its probe, when it differs) to Prometheus at `url`."""
    outcomes = []
    for query in queries:
        if query.problem:
            outcomes.append(Outcome(query, query.problem, 0))
            continue
        answer = _ask(url, query.expr)
        if answer["status"] != "success":
            error = f"{answer.get('errorType')}: {answer.get('error')}"
            outcomes.append(Outcome(query, error, 0))
            continue
        if query.probe != query.expr:
            answer = _ask(url, query.probe)
            if answer["status"] != "success":
                error = f"{answer.get('errorType')} (compared value): {answer.get('error')}"
                outcomes.append(Outcome(query, error, 0))
                continue
        outcomes.append(Outcome(query, None, _series(answer)))
    return outcomes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="Prometheus base URL")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="dashboard variable value (default: job and instance match .*)")
    parser.add_argument("--require-series", action="store_true",
                        help="fail when an expression returns no series")
    args = parser.parse_args(argv)

    variables = dict(DEFAULT_VARIABLES)
    for item in args.var:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--var wants NAME=VALUE, got {item!r}")
        variables[name] = value

    try:
        outcomes = run(args.url, all_queries(variables))
    except urllib.error.URLError as error:
        print(f"promql: cannot query Prometheus at {args.url}: {error}")
        return 2
    invalid = [o for o in outcomes if o.error]
    empty = [o for o in outcomes if not o.error and o.series == 0]
    for o in invalid:
        print(f"INVALID  {o.query.source}\n         {o.error}\n         {o.query.expr}")
    if args.require_series:
        for o in empty:
            print(f"NO DATA  {o.query.source}\n         {o.query.probe}")
    print(f"promql: {len(outcomes)} expressions, {len(invalid)} invalid, {len(empty)} without series")
    return 1 if invalid or (args.require_series and empty) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
