#!/usr/bin/env bash
# The missed-runs audit, as terraform/audit.tf creates it (docs/how-to/audit-catch-up.md):
# the auditor account with run.invoker on the service, its Scheduler job POSTing
# /v1/audit:run every 10 minutes with {"since": "10m"} (each fire time reported by exactly one
# audit), the log-based metric runonce/missed_runs on the audit's ERROR lines, and an alert policy
# on it. Idempotent: each piece is read first and written only when missing or different.
case "${BASH_VERSION:-}" in "" | [12].* | 3.[01].*) echo "$0: needs bash 3.2 or later (macOS's /bin/bash is 3.2), not ${BASH_VERSION:-sh}" >&2; exit 1 ;; esac
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") --project PROJECT_ID --region REGION [options]

Run after deploy-service.sh (the grant is on the service), and deploy the service with
--admin-callers AUDITOR_EMAIL: the audit endpoint answers admin callers only. The auditor is
also the account deploy/smoke.sh reads runs as: --token-creators lets you mint its identity tokens.

Options (each also read from the environment variable in brackets):
  --project ID                  project of the service, job, metric and policy     [PROJECT_ID]
  --region REGION               service region, and the job's location             [REGION]
  --location REGION             Scheduler location, if not --region                [SCHEDULER_LOCATION]
  --service NAME                Cloud Run service (default: runonce)               [SERVICE]
  --service-url URL             runonce's URL and OIDC audience (default: the deterministic run.app URL) [SERVICE_URL]
  --auditor-sa ID|EMAIL         the audit's account (default: runonce-auditor)     [AUDITOR_SA]
  --job JOB_ID                  Scheduler job ID (default: runonce-audit)          [JOB]
  --notification-channels LIST  comma-separated projects/P/notificationChannels/ID for the alert (optional) [NOTIFICATION_CHANNELS]
  --token-creators MEMBERS      comma-separated IAM members (user:you@example.com, group:…) granted
                                roles/iam.serviceAccountOpenIdTokenCreator on the auditor, to read runs
                                as it (deploy/smoke.sh, the admin API) (optional) [TOKEN_CREATORS]
  --request-timeout N           the service's request timeout: the job's attempt deadline (default: 120) [REQUEST_TIMEOUT]
  --lease-seconds N             the service's RUNONCE_LEASE_SECONDS (default: 300) [LEASE_SECONDS]
  --dispatch-timeout-seconds N  the service's RUNONCE_DISPATCH_TIMEOUT_SECONDS (default: 30) [DISPATCH_TIMEOUT_SECONDS]
  --retention-seconds N         the service's RUNONCE_RETENTION_SECONDS (default: 86400) [RETENTION_SECONDS]
  -h, --help                    this help
USAGE
}

PROJECT_ID="${PROJECT_ID:-}"
REGION="${REGION:-}"
LOCATION="${SCHEDULER_LOCATION:-}"
SERVICE="${SERVICE:-runonce}"
SERVICE_URL="${SERVICE_URL:-}"
AUDITOR_SA="${AUDITOR_SA:-runonce-auditor}"
JOB="${JOB:-runonce-audit}"
NOTIFICATION_CHANNELS="${NOTIFICATION_CHANNELS:-}"
TOKEN_CREATORS="${TOKEN_CREATORS:-}"
REQUEST_TIMEOUT="${REQUEST_TIMEOUT:-120}"
LEASE_SECONDS="${LEASE_SECONDS:-300}"
DISPATCH_TIMEOUT_SECONDS="${DISPATCH_TIMEOUT_SECONDS:-30}"
RETENTION_SECONDS="${RETENTION_SECONDS:-86400}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project) PROJECT_ID="$(flag_value "$@")"; shift 2 ;;
    --region) REGION="$(flag_value "$@")"; shift 2 ;;
    --location) LOCATION="$(flag_value "$@")"; shift 2 ;;
    --service) SERVICE="$(flag_value "$@")"; shift 2 ;;
    --service-url) SERVICE_URL="$(flag_value "$@")"; shift 2 ;;
    --auditor-sa) AUDITOR_SA="$(flag_value "$@")"; shift 2 ;;
    --job) JOB="$(flag_value "$@")"; shift 2 ;;
    --notification-channels) NOTIFICATION_CHANNELS="$(flag_value "$@")"; shift 2 ;;
    --token-creators) TOKEN_CREATORS="$(flag_value "$@")"; shift 2 ;;
    --request-timeout) REQUEST_TIMEOUT="$(flag_value "$@")"; shift 2 ;;
    --lease-seconds) LEASE_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --dispatch-timeout-seconds) DISPATCH_TIMEOUT_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --retention-seconds) RETENTION_SECONDS="$(flag_value "$@")"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

require "$PROJECT_ID" "--project (or PROJECT_ID)"
require "$REGION" "--region (or REGION)"
[[ "$SERVICE" =~ ^[a-z]([a-z0-9-]{0,47}[a-z0-9])?$ ]] || usage_error "--service must be a Cloud Run service name, got '$SERVICE'"
[[ -z "$NOTIFICATION_CHANNELS" || "$NOTIFICATION_CHANNELS" =~ ^projects/[^/,]+/notificationChannels/[0-9]+(,projects/[^/,]+/notificationChannels/[0-9]+)*$ ]] ||
  usage_error "--notification-channels must be comma-separated projects/P/notificationChannels/ID, got '$NOTIFICATION_CHANNELS'"
[[ -z "$TOKEN_CREATORS" || "$TOKEN_CREATORS" =~ ^(user|group|serviceAccount|domain):[^,:[:space:]]+(,(user|group|serviceAccount|domain):[^,:[:space:]]+)*$ ]] ||
  usage_error "--token-creators must be comma-separated IAM members (user:EMAIL, group:EMAIL, serviceAccount:EMAIL, domain:DOMAIN), got '$TOKEN_CREATORS'"
LOCATION="${LOCATION:-$REGION}"
AUDITOR_EMAIL="$(sa_email "$AUDITOR_SA" "$PROJECT_ID")"
SERVICE_URL="${SERVICE_URL:-$(service_url "$SERVICE" "$PROJECT_ID" "$REGION")}"

# 1. The auditor, which may invoke the service (runonce then checks it is an admin caller).
ensure_service_account "$AUDITOR_EMAIL" "runonce auditor" \
  "The audit's Scheduler job signs its OIDC tokens as this account: runonce's admin caller (RUNONCE_ADMIN_CALLERS)."
ensure_binding roles/run.invoker "serviceAccount:$AUDITOR_EMAIL" "" "" run services -- "$SERVICE" \
  --region="$REGION" --project="$PROJECT_ID"

# Who may mint the auditor's identity tokens: to read runs through the admin API as it.
IFS=',' read -r -a CREATORS <<<"$TOKEN_CREATORS"
for member in ${CREATORS[@]+"${CREATORS[@]}"}; do
  ensure_binding roles/iam.serviceAccountOpenIdTokenCreator "$member" "" "" iam service-accounts -- "$AUDITOR_EMAIL" \
    --project="$PROJECT_ID"
done

# 2. The job: every 10 minutes, {"since": "10m"}, the retry settings every job has (checked against
# the lease by scheduler-job.sh), the attempt deadline the request timeout (the audit and its
# catch-ups answer in one request).
bash "$DEPLOY_LIB/../scheduler-job.sh" --project "$PROJECT_ID" --location "$LOCATION" --job "$JOB" \
  --path "/v1/audit:run" --schedule "*/10 * * * *" --time-zone Etc/UTC --body '{"since":"10m"}' \
  --description "runonce audit: reports scheduled runs that left no record, and catches up routes with catch_up." \
  --service-url "$SERVICE_URL" --invoker-sa "$AUDITOR_EMAIL" --attempt-deadline "$REQUEST_TIMEOUT" \
  --request-timeout "$REQUEST_TIMEOUT" --lease-seconds "$LEASE_SECONDS" \
  --dispatch-timeout-seconds "$DISPATCH_TIMEOUT_SECONDS" --retention-seconds "$RETENTION_SECONDS"

# 3 and 4. The metric counts the audit's ERROR lines (one per missed run: Cloud Logging keeps them
# whichever instance wrote them, unlike the in-memory Prometheus counter), and the policy alerts
# when it is above 0. Both exactly as terraform/audit.tf has them.
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" - "$WORK" "$SERVICE" "$PROJECT_ID" "$NOTIFICATION_CHANNELS" "$DEPLOY_LIB" <<'PY'
import json, sys
work, service, project, channels, deploy_lib = sys.argv[1:]
sys.path.insert(0, deploy_lib)
from observability import runbook  # the runbook terraform/audit.tf gives the policy
log_filter = (f'resource.type="cloud_run_revision"\nresource.labels.service_name="{service}"\n'
              'severity=ERROR\njsonPayload.outcome="missed"\n')
metric = {
    "name": "runonce/missed_runs",
    "description": "Scheduled runs runonce's audit found no record of, by route (one ERROR line each).",
    "filter": log_filter,
    "metricDescriptor": {
        "metricKind": "DELTA", "valueType": "INT64", "unit": "1", "displayName": "runonce missed runs",
        "labels": [{"key": "route", "valueType": "STRING", "description": "runonce route name"}],
    },
    "labelExtractors": {"route": "EXTRACT(jsonPayload.route)"},
}
policy = {
    "displayName": "runonce: a scheduled run was missed",
    "combiner": "OR",
    "enabled": True,
    "notificationChannels": [c for c in channels.split(",") if c],
    "conditions": [{
        "displayName": "missed runs > 0",
        "conditionThreshold": {
            "filter": 'resource.type = "cloud_run_revision" AND metric.type = "logging.googleapis.com/user/runonce/missed_runs"',
            "comparison": "COMPARISON_GT", "thresholdValue": 0, "duration": "0s",
            "aggregations": [{"alignmentPeriod": "600s", "perSeriesAligner": "ALIGN_SUM",
                              "crossSeriesReducer": "REDUCE_SUM", "groupByFields": ["metric.label.route"]}],
            "trigger": {"count": 1},
        },
    }],
    "alertStrategy": {"autoClose": "86400s"},
    "documentation": {
        "mimeType": "text/markdown",
        "subject": "runonce: a scheduled run did not run",
        "content": runbook("missed_runs", {"var.service_name": service}),
    },
}
for name, value in (("metric", metric), ("policy", policy)):
    with open(f"{work}/{name}.json", "w") as handle:
        json.dump(value, handle)
PY

METRIC="runonce/missed_runs"
if EXISTING="$(gc logging metrics describe "$METRIC" --project="$PROJECT_ID" --format=json 2>/dev/null)"; then
  if "$PYTHON" "$DEPLOY_LIB/json_contains.py" "$(cat "$WORK/metric.json")" <<<"$EXISTING"; then
    log "= log metric $METRIC is up to date"
  else
    log "~ update log metric $METRIC"
    gc logging metrics update "$METRIC" --project="$PROJECT_ID" --config-from-file="$WORK/metric.json" --format='value(name)' >/dev/null
  fi
else
  log "+ log metric $METRIC"
  gc logging metrics create "$METRIC" --project="$PROJECT_ID" --config-from-file="$WORK/metric.json" --format='value(name)' >/dev/null
fi

# Alert policies have generated IDs: the display name finds ours (gcloud has them in alpha only).
POLICY_NAME="runonce: a scheduled run was missed"
POLICIES="$(gc alpha monitoring policies list --project="$PROJECT_ID" --filter="displayName=\"$POLICY_NAME\"" --format=json)" || {
  log "! cannot list alert policies: gcloud has them in its alpha track only (gcloud components install alpha)"
  exit 1
}
read -r COUNT EXISTING_POLICY <<<"$("$PYTHON" -c 'import json, sys; p = json.load(sys.stdin); print(len(p), p[0]["name"] if p else "")' <<<"$POLICIES")"
if (( COUNT > 1 )); then
  log "! $COUNT alert policies are named '$POLICY_NAME': delete all but one, then run again"
  exit 1
elif (( COUNT == 1 )); then
  if "$PYTHON" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)[0]))' <<<"$POLICIES" |
    "$PYTHON" "$DEPLOY_LIB/json_contains.py" "$(cat "$WORK/policy.json")"; then
    log "= alert policy '$POLICY_NAME' is up to date"
  else
    log "~ update alert policy $EXISTING_POLICY"
    gc alpha monitoring policies update "$EXISTING_POLICY" --project="$PROJECT_ID" --policy-from-file="$WORK/policy.json" --format='value(name)' >/dev/null
  fi
else
  log "+ alert policy '$POLICY_NAME'"
  gc alpha monitoring policies create --project="$PROJECT_ID" --policy-from-file="$WORK/policy.json" --format='value(name)' >/dev/null
fi

log "the audit endpoint answers admin callers only: deploy the service with --admin-callers $AUDITOR_EMAIL (RUNONCE_ADMIN_CALLERS)"
