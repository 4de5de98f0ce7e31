"""The REST bodies of terraform/log_metrics.tf, dashboard.tf and alerts.tf for deploy/observability.sh:
the same log-based metrics and alert conditions (a test holds them equal to terraform's), the same
dashboard file, and each policy's runbook read from terraform/alerts.tf itself.

    python3 observability.py OUT_DIR SERVICE PROJECT SCHEDULER_LOCATION CHANNELS JOBS

writes OUT_DIR/metrics/NAME.json (NAME without the runonce/ prefix), OUT_DIR/dashboard.json and
OUT_DIR/policies/NAME.json. CHANNELS and JOBS are comma-separated (either may be empty). Only the
standard library: it runs wherever the deploy scripts do.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

TERRAFORM = Path(__file__).resolve().parent.parent.parent / "terraform"
USER = "logging.googleapis.com/user"
DOCUMENTED_5XX = ["failed", "unavailable", "unknown"]
SCHEDULER_RETRIES = 5  # scheduler-job.sh's default retry count: the fewest retries its jobs have


def _label(key: str, description: str) -> dict[str, str]:
    return {"key": key, "valueType": "STRING", "description": description}


def metrics(service: str, jobs: list[str]) -> dict[str, dict[str, Any]]:
    service_logs = f'resource.type="cloud_run_revision"\nresource.labels.service_name="{service}"\n'
    delivery_logs = f'{service_logs}jsonPayload.logger="runonce.access"\njsonPayload.outcome:*\n'
    route = _label("route", "runonce route name")
    found: dict[str, dict[str, Any]] = {
        "deliveries": {
            "description": "runonce deliveries, one per answer, by route, outcome (the response's status), "
            "skip reason and target type.",
            "filter": delivery_logs,
            "metricDescriptor": {
                "metricKind": "DELTA",
                "valueType": "INT64",
                "unit": "1",
                "displayName": "runonce deliveries",
                "labels": [
                    route,
                    _label("outcome", "the answer's status: processed, duplicate, skipped, failed, unknown, ..."),
                    _label("reason", "why a run was skipped: late or overlap"),
                    _label("target_type", "the route's target type"),
                ],
            },
            "labelExtractors": {
                "route": "EXTRACT(jsonPayload.route)",
                "outcome": "EXTRACT(jsonPayload.outcome)",
                "reason": "EXTRACT(jsonPayload.reason)",
                "target_type": "EXTRACT(jsonPayload.target_type)",
            },
        },
        "lateness": {
            "description": "Seconds from a scheduled run's schedule time to the delivery that dispatched it, by route.",
            "filter": f'{delivery_logs}jsonPayload.outcome="processed"\njsonPayload.lateness_seconds:*\n',
            "valueExtractor": "EXTRACT(jsonPayload.lateness_seconds)",
            "metricDescriptor": {
                "metricKind": "DELTA",
                "valueType": "DISTRIBUTION",
                "unit": "s",
                "displayName": "runonce lateness",
                "labels": [route],
            },
            "labelExtractors": {"route": "EXTRACT(jsonPayload.route)"},
            "bucketOptions": {"exponentialBuckets": {"numFiniteBuckets": 20, "growthFactor": 2, "scale": 0.1}},
        },
        "recovered_failures": {
            "description": "Runs a retry completed right after an attempt that answered failed, by route: each "
            "made one failed answer good (a throttled, waiting or unknown attempt before it is not a failure "
            "and is not counted).",
            "filter": f'{delivery_logs}jsonPayload.outcome="processed"\njsonPayload.recovered_failure:*\n',
            "metricDescriptor": {
                "metricKind": "DELTA",
                "valueType": "INT64",
                "unit": "1",
                "displayName": "runonce failed runs completed by a retry",
                "labels": [route],
            },
            "labelExtractors": {"route": "EXTRACT(jsonPayload.route)"},
        },
        "unresolved_runs": {
            "description": "Runs the audit found still in_progress three leases after their latest attempt "
            "began, by route (one WARNING line each, every audit).",
            "filter": f'{service_logs}jsonPayload.logger="runonce.audit"\njsonPayload.outcome="unresolved"\n',
            "metricDescriptor": {
                "metricKind": "DELTA",
                "valueType": "INT64",
                "unit": "1",
                "displayName": "runonce unresolved runs",
                "labels": [route],
            },
            "labelExtractors": {"route": "EXTRACT(jsonPayload.route)"},
        },
        "store_unavailable": {
            "description": "Answers 503 unavailable (the claim store did not answer) and failed /readyz probes.",
            "filter": f'{service_logs}jsonPayload.logger="runonce.access"\n(jsonPayload.outcome="unavailable" OR '
            '(httpRequest.requestUrl="/readyz" AND httpRequest.status=503))\n',
            "metricDescriptor": {
                "metricKind": "DELTA",
                "valueType": "INT64",
                "unit": "1",
                "displayName": "runonce store unavailable",
            },
        },
        "service_errors": {
            "description": "runonce 5xx answers that are not in its status table (failed 502, unavailable "
            "503, unknown 504), and failed /readyz excluded.",
            "filter": f'{service_logs}jsonPayload.logger="runonce.access"\nhttpRequest.status>=500\n'
            f"NOT jsonPayload.outcome=({' OR '.join(f'{chr(34)}{s}{chr(34)}' for s in DOCUMENTED_5XX)})\n"
            'NOT httpRequest.requestUrl="/readyz"\n',
            "metricDescriptor": {
                "metricKind": "DELTA",
                "valueType": "INT64",
                "unit": "1",
                "displayName": "runonce undocumented 5xx",
            },
        },
    }
    if jobs:
        found["scheduler_attempts_failed"] = {
            "description": "Cloud Scheduler's failed attempts (AttemptFinished at ERROR) of the jobs that "
            "call runonce, by job.",
            "filter": 'resource.type="cloud_scheduler_job"\n'
            f"resource.labels.job_id=({' OR '.join(f'{chr(34)}{job}{chr(34)}' for job in jobs)})\n"
            'jsonPayload."@type"="type.googleapis.com/google.cloud.scheduler.logging.AttemptFinished"\n'
            "severity>=ERROR\n",
            "metricDescriptor": {
                "metricKind": "DELTA",
                "valueType": "INT64",
                "unit": "1",
                "displayName": "runonce Scheduler attempts failed",
            },
        }
    return {name: {"name": f"runonce/{name}", **body} for name, body in found.items()}


def dashboard(service: str) -> dict[str, Any]:
    return json.loads((TERRAFORM / "dashboard.json").read_text().replace("${service_name}", service))


def runbook(policy: str, values: dict[str, str]) -> str:
    """The documentation.content of `policy` in terraform/alerts.tf (or audit.tf), its ${...} replaced
    by `values`."""
    source = "\n".join((TERRAFORM / name).read_text() for name in ("alerts.tf", "audit.tf"))
    start = source.index(f'resource "google_monitoring_alert_policy" "{policy}"')
    heredoc = re.search(r"content\s+= <<-EOT\n(.*?)\n\s*EOT\n", source[start:], re.S)
    assert heredoc is not None, policy
    text = textwrap.dedent(heredoc.group(1)).strip() + "\n"
    return re.sub(r"\$\{([^}]+)\}", lambda m: values[m.group(1)], text)


def _threshold(metric: str, *, value: float, period: str, duration: str, group: list[str] | None) -> dict[str, Any]:
    resource = "cloud_scheduler_job" if metric == "scheduler_attempts_failed" else "cloud_run_revision"
    aggregation: dict[str, Any] = {
        "alignmentPeriod": period,
        "perSeriesAligner": "ALIGN_SUM",
        "crossSeriesReducer": "REDUCE_SUM",
    }
    if group:
        aggregation["groupByFields"] = group
    return {
        "conditionThreshold": {
            "filter": f'resource.type = "{resource}" AND metric.type = "{USER}/runonce/{metric}"',
            "comparison": "COMPARISON_GT",
            "thresholdValue": value,
            "duration": duration,
            "aggregations": [aggregation],
            "trigger": {"count": 1},
        }
    }


def policies(service: str, project: str, location: str, channels: list[str], jobs: list[str]) -> dict[str, Any]:
    failed = 'logging_googleapis_com:user_runonce_deliveries{outcome="failed", monitored_resource="cloud_run_revision"}'
    recovered = 'logging_googleapis_com:user_runonce_recovered_failures{monitored_resource="cloud_run_revision"}'
    query = (
        "(\n"
        f"  (sum by (route) (increase({failed}[1h]))\n"
        "    - on (route)\n"
        f"  sum by (route) (increase({recovered}[1h])))\n"
        f"  or sum by (route) (increase({failed}[1h]))\n"
        ") > 0\n"
    )
    values = {
        "var.service_name": service,
        "var.project_id": project,
        "local.scheduler_region": location,
        "local.scheduler_attempt_threshold": str(SCHEDULER_RETRIES),
    }
    specs: dict[str, tuple[str, str, dict[str, Any], str, str | None]] = {
        "runs_unresolved": (
            "runonce: runs unresolved",
            "unresolved runs > 0",
            _threshold("unresolved_runs", value=0, period="600s", duration="0s", group=["metric.label.route"]),
            "3600s",
            None,
        ),
        "target_failures": (
            "runonce: target failures",
            "failed answers not made good by a retry, per route, over an hour",
            {
                "conditionPrometheusQueryLanguage": {
                    "query": query,
                    "duration": "900s",
                    "evaluationInterval": "60s",
                }
            },
            "86400s",
            None,
        ),
        "store_unavailable": (
            "runonce: claim store unavailable",
            "unavailable answers or failed /readyz > 3 per 5 minutes, for 5 minutes",
            _threshold("store_unavailable", value=3, period="300s", duration="300s", group=None),
            "3600s",
            None,
        ),
        "service_errors": (
            "runonce: undocumented 5xx answers",
            "5xx answers outside the status table > 0",
            _threshold("service_errors", value=0, period="600s", duration="0s", group=None),
            "86400s",
            "WARNING",
        ),
    }
    if jobs:
        specs["scheduler_attempts_failing"] = (
            "runonce: Scheduler attempts failing",
            f"failed attempts of one job per hour > {SCHEDULER_RETRIES}",
            _threshold(
                "scheduler_attempts_failed",
                value=SCHEDULER_RETRIES,
                period="3600s",
                duration="0s",
                group=["resource.label.job_id"],
            ),
            "86400s",
            None,
        )
    found = {}
    for name, (display, condition_name, condition, auto_close, severity) in specs.items():
        source = (TERRAFORM / "alerts.tf").read_text()
        subject = re.search(
            rf'"{name}" \{{.*?subject\s+= "([^"]*)"', source, re.S
        )  # the notification's subject line, as terraform sets it
        policy: dict[str, Any] = {
            "displayName": display,
            "combiner": "OR",
            "enabled": True,
            "notificationChannels": channels,
            "conditions": [{"displayName": condition_name, **condition}],
            "alertStrategy": {"autoClose": auto_close},
            "documentation": {
                "mimeType": "text/markdown",
                "subject": subject.group(1) if subject else display,
                "content": runbook(name, values),
            },
        }
        if severity:
            policy["severity"] = severity
        found[name] = policy
    return found


def main(out: str, service: str, project: str, location: str, channels: str, jobs: str) -> None:
    channel_list = [c for c in channels.split(",") if c]
    job_list = [j for j in jobs.split(",") if j]
    root = Path(out)
    (root / "metrics").mkdir(parents=True, exist_ok=True)
    (root / "policies").mkdir(parents=True, exist_ok=True)
    for name, body in metrics(service, job_list).items():
        (root / "metrics" / f"{name}.json").write_text(json.dumps(body, indent=2))
    (root / "dashboard.json").write_text(json.dumps(dashboard(service), indent=2))
    for name, body in policies(service, project, location, channel_list, job_list).items():
        (root / "policies" / f"{name}.json").write_text(json.dumps(body, indent=2))


if __name__ == "__main__":
    main(*sys.argv[1:])
