"""Structural checks of dashboards/: dashboard, alert rules, Grafana alerts, runbook.

- The dashboard survives a round trip through grafana-foundation-sdk's model
  (Dashboard.from_json ignores keys it does not know, so a key missing from
  the dumped-back JSON is an unknown key, usually a typo).
- Every panel has a description, a known unit, and the ${datasource} data source;
  every selector in it filters on job=~"$job" and instance=~"$instance".
- Every alert rule has severity, summary, description and a runbook_url whose
  anchor is a heading of RUNBOOK.md, and filters on job="redlock-agent".
- grafana-alerts.yaml validates against schema/ and matches alerts.rules.yaml
  rule for rule (value, threshold, for, labels, annotations).
- Every metric any expression uses is listed in metrics.txt.

Prints one line per problem and a summary; exits 1 on any problem.
"""

import json
import re
import sys
from pathlib import Path

import jsonschema
import promql_parser
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import units
from grafana_foundation_sdk.models.dashboard import Dashboard

import promql

DIR = promql.DASHBOARDS
RUNBOOK = DIR / "RUNBOOK.md"
METRICS = DIR / "metrics.txt"
SCHEMA = DIR / "schema" / "grafana-alert-provisioning.schema.json"
RUNBOOK_URL = "RUNBOOK.md#"
DASHBOARD_UID = "redlock-agent"
DATASOURCE = "${datasource}"
SEVERITIES = {"critical", "warning"}
# Series Prometheus makes itself, allowed beside the agent's own metrics.
BUILTIN_SERIES = {"up"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
KNOWN_UNITS = {v for k, v in vars(units).items() if not k.startswith("_") and isinstance(v, str)}
THRESHOLDS = {">": "gt", "<": "lt"}


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())


def selectors(expr: str) -> list:
    """Every vector selector in `expr`; raises ValueError if it does not parse."""
    found = []

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def metric_name(selector) -> str | None:
    if selector.name:
        return selector.name
    for m in selector.matchers.matchers:
        if m.name == "__name__" and m.op == promql_parser.MatchOp.Equal:
            return m.value
    return None


def has_matcher(selector, name: str, op, value: str) -> bool:
    return any(m.name == name and m.op == op and m.value == value for m in selector.matchers.matchers)


def normalized(expr: str) -> str:
    return str(promql_parser.parse(expr))


# --- dashboard -----------------------------------------------------------------

def dropped_keys(source, dumped, path="$") -> list[str]:
    """Keys and values of `source` that `dumped` lost or changed."""
    if isinstance(source, dict) and isinstance(dumped, dict):
        errors = []
        for key, value in source.items():
            if key in dumped:
                errors += dropped_keys(value, dumped[key], f"{path}.{key}")
            else:
                errors.append(f"{path}.{key}: unknown key, dropped by the SDK")
        return errors
    if isinstance(source, list) and isinstance(dumped, list) and len(source) == len(dumped):
        return [e for i, (a, b) in enumerate(zip(source, dumped)) for e in dropped_keys(a, b, f"{path}[{i}]")]
    return [] if source == dumped else [f"{path}: {source!r} became {dumped!r}"]


def check_round_trip(dashboard: dict) -> list[str]:
    register_default_plugins()
    try:
        model = Dashboard.from_json(dashboard)
        dumped = json.loads(json.dumps(model, cls=JSONEncoder))
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        return [f"dashboard: grafana-foundation-sdk cannot read it: {error!r}"]
    return [f"dashboard {err}" for err in dropped_keys(dashboard, dumped)]


def check_variables(dashboard: dict) -> list[str]:
    errors = []
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource", {})
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        errors.append("dashboard: needs a variable `datasource` of type datasource, query prometheus")
    for name in ("job", "instance"):
        var = variables.get(name, {})
        if var.get("type") != "query" or not str(var.get("query", "")).startswith("label_values("):
            errors.append(f"dashboard: variable `{name}` must be a label_values query")
        elif var.get("datasource", {}).get("uid") != DATASOURCE:
            errors.append(f"dashboard: variable `{name}` must query {DATASOURCE}")
    return errors


def check_panels(dashboard: dict) -> list[str]:
    errors = []
    if dashboard.get("uid") != DASHBOARD_UID:
        errors.append(f"dashboard: uid must be {DASHBOARD_UID!r}")
    panels = promql._panels(dashboard.get("panels", []))
    ids = [p.get("id") for p in panels]
    if len(set(ids)) != len(ids):
        errors.append(f"dashboard: panel ids are not unique: {ids}")
    for panel in panels:
        if panel.get("type") == "row":
            continue
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        if not panel.get("description", "").strip():
            errors.append(f"{where}: no description")
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if unit not in KNOWN_UNITS:
            errors.append(f"{where}: fieldConfig.defaults.unit {unit!r} is not a Grafana unit")
        if panel.get("datasource", {}).get("uid") != DATASOURCE:
            errors.append(f"{where}: datasource must be {DATASOURCE}")
        if not panel.get("targets"):
            errors.append(f"{where}: no targets")
        for target in panel.get("targets", []):
            if target.get("datasource", {}).get("uid", DATASOURCE) != DATASOURCE:
                errors.append(f"{where} target {target.get('refId')}: datasource must be {DATASOURCE}")
    return errors


def check_dashboard_filters() -> list[str]:
    """Every selector in a panel keeps to the chosen job and instance."""
    errors = []
    keep = {"job": "$job", "instance": "$instance"}
    for query in promql.panel_queries(keep):
        if query.problem:
            errors.append(f"{query.source}: {query.problem}")
            continue
        try:
            found = selectors(query.expr)
        except ValueError as error:
            errors.append(f"{query.source}: does not parse: {error}")
            continue
        for sel in found:
            for label, value in keep.items():
                if not has_matcher(sel, label, promql_parser.MatchOp.Re, value):
                    errors.append(f'{query.source}: {metric_name(sel)} lacks {label}=~"{value}"')
    return errors


# --- alert rules, runbook --------------------------------------------------------

def runbook_headings() -> list[str]:
    """Headings of RUNBOOK.md, code blocks skipped."""
    headings, fenced = [], False
    for line in RUNBOOK.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            headings.append(m.group(1))
    return headings


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def alert_rules() -> list[dict]:
    return [r for g in load_yaml(promql.RULES)["groups"] for r in g["rules"] if "alert" in r]


def split_comparison(expr: str):
    """(value, op, number) of `<value> > N` or `<value> < N`, else None."""
    tree = promql_parser.parse(expr)
    if (isinstance(tree, promql_parser.BinaryExpr) and str(tree.op) in THRESHOLDS
            and tree.modifier is None and isinstance(tree.rhs, promql_parser.NumberLiteral)):
        return str(tree.lhs), str(tree.op), tree.rhs.val
    return None


def check_rules() -> list[str]:
    errors = []
    anchors = {anchor(h) for h in runbook_headings()}
    for rule in alert_rules():
        name = rule["alert"]
        if rule.get("labels", {}).get("severity") not in SEVERITIES:
            errors.append(f"{name}: labels.severity must be one of {sorted(SEVERITIES)}")
        notes = rule.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            if not str(notes.get(key, "")).strip():
                errors.append(f"{name}: no annotations.{key}")
        url = notes.get("runbook_url", "")
        target = url[len(RUNBOOK_URL):] if url.startswith(RUNBOOK_URL) else None
        if target is None:
            errors.append(f"{name}: runbook_url must start with {RUNBOOK_URL}")
        elif target not in anchors:
            errors.append(f"{name}: runbook_url anchor #{target} is not a heading in RUNBOOK.md")
        elif target != name.lower():
            errors.append(f"{name}: runbook_url should point at #{name.lower()}")
        try:
            if split_comparison(rule["expr"]) is None:
                errors.append(f"{name}: expr must be `<value> > N` or `<value> < N` (Grafana twin)")
            for sel in selectors(rule["expr"]):
                if not has_matcher(sel, "job", promql_parser.MatchOp.Equal, "redlock-agent"):
                    errors.append(f'{name}: {metric_name(sel)} lacks job="redlock-agent"')
        except ValueError as error:
            errors.append(f"{name}: expr does not parse: {error}")
    alerts = {r["alert"] for r in alert_rules()}
    errors += [f"RUNBOOK.md: section {h!r} names no alert" for h in runbook_headings()
               if re.fullmatch(r"Redlock[A-Z]\w*", h) and h not in alerts]
    return errors


# --- Grafana alerts ------------------------------------------------------------

def check_grafana_schema(grafana: dict) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    return [f"grafana-alerts.yaml {e.json_path}: {e.message}" for e in validator.iter_errors(grafana)]


def _query(rule: dict, ref: str) -> dict:
    return next((d for d in rule["data"] if d["refId"] == ref), {})


def check_grafana_twins(grafana: dict, dashboard: dict) -> list[str]:
    """Each Grafana rule computes what its Prometheus twin computes."""
    errors = []
    prom = {r["alert"]: r for r in alert_rules()}
    rules = [r for g in grafana.get("groups", []) for r in g.get("rules", [])]
    titles = [r.get("title") for r in rules]
    if sorted(titles) != sorted(prom):
        errors.append(f"grafana-alerts.yaml: alerts {sorted(titles)} differ from alerts.rules.yaml {sorted(prom)}")
    uids = [r.get("uid") for r in rules]
    if len(set(uids)) != len(uids):
        errors.append("grafana-alerts.yaml: rule uids are not unique")
    panel_ids = {p.get("id") for p in promql._panels(dashboard.get("panels", []))}
    for rule in rules:
        name = rule.get("title")
        twin = prom.get(name)
        if twin is None:
            continue
        try:
            split = split_comparison(twin["expr"])
            condition = _query(rule, rule["condition"])["model"]
            reduced = _query(rule, condition["expression"])["model"]
            queried = _query(rule, reduced["expression"])["model"]
            evaluator = condition["conditions"][0]["evaluator"]
            if (condition["type"], reduced["type"]) != ("threshold", "reduce"):
                errors.append(f"grafana {name}: condition must be a threshold on a reduce of the query")
            elif split is None or normalized(queried["expr"]) != normalized(split[0]):
                errors.append(f"grafana {name}: query {reduced['expression']} is not the value alerts.rules.yaml compares")
            elif evaluator != {"type": THRESHOLDS[split[1]], "params": [split[2]]}:
                errors.append(f"grafana {name}: threshold {evaluator} differs from `{split[1]} {split[2]:g}`")
        except (KeyError, IndexError, TypeError, ValueError) as error:
            errors.append(f"grafana {name}: condition chain C -> reduce -> query is broken: {error!r}")
        if rule.get("for") != twin.get("for"):
            errors.append(f"grafana {name}: for {rule.get('for')} differs from {twin.get('for')}")
        if rule.get("labels") != twin.get("labels"):
            errors.append(f"grafana {name}: labels differ from alerts.rules.yaml")
        expected = dict(twin.get("annotations", {}))
        # Grafana names the value of refId B `$values.B.Value`, Prometheus `$value`.
        expected["description"] = expected.get("description", "").replace("$value", "$values.B.Value")
        if rule.get("annotations") != expected:
            errors.append(f"grafana {name}: annotations differ from alerts.rules.yaml")
        if rule.get("dashboardUid", DASHBOARD_UID) != DASHBOARD_UID or \
                ("panelId" in rule and rule["panelId"] not in panel_ids):
            errors.append(f"grafana {name}: dashboardUid/panelId do not name a panel of {DASHBOARD_UID}")
    return errors


# --- metrics -------------------------------------------------------------------

def check_metric_names() -> list[str]:
    listed = {line.strip() for line in METRICS.read_text().splitlines() if line.strip()}
    errors = []
    queries = promql.all_queries(promql.DEFAULT_VARIABLES)
    for query in queries:
        try:
            found = selectors(query.expr)
        except ValueError:
            continue  # reported by the checks above and by promql.py
        for sel in found:
            name = metric_name(sel)
            base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name and name.endswith(s)), None)
            if name in listed or name in BUILTIN_SERIES or base in listed:
                continue
            errors.append(f"{query.source}: metric {name!r} is not in metrics.txt")
    return errors


def main() -> int:
    dashboard = json.loads(promql.DASHBOARD.read_text())
    grafana = load_yaml(promql.GRAFANA_ALERTS)
    checks = {
        "dashboard round trip through grafana-foundation-sdk": lambda: check_round_trip(dashboard),
        "dashboard variables": lambda: check_variables(dashboard),
        "dashboard panels: unit, description, datasource": lambda: check_panels(dashboard),
        "dashboard expressions filter on $job and $instance": check_dashboard_filters,
        "alert rules: labels, annotations, runbook anchors": check_rules,
        "grafana-alerts.yaml against its JSON Schema": lambda: check_grafana_schema(grafana),
        "grafana-alerts.yaml matches alerts.rules.yaml": lambda: check_grafana_twins(grafana, dashboard),
        "metric names are in metrics.txt": check_metric_names,
    }
    failed = 0
    for title, check in checks.items():
        errors = check()
        print(f"{'ok  ' if not errors else 'FAIL'} {title}")
        for error in errors:
            print(f"       {error}")
        failed += bool(errors)
    print(f"check_dashboards: {len(checks)} checks, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
