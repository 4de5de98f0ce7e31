#!/usr/bin/env bash
# The dashboard, log-based metrics and alert policies of terraform/dashboard.tf, log_metrics.tf and
# alerts.tf (docs/operating.md), with gcloud. The metrics and the dashboard are made with gcloud's
# GA commands; alert policies exist in gcloud's alpha track only, so they are written to files and
# the exact commands printed, and run only with --create-alerts (needs `gcloud components install
# alpha`). The no-progress policies are terraform's alone: their windows come from each job's
# schedule (terraform/alert_rules.tf). The missed-runs policy is audit-job.sh's.
# Idempotent: each piece is read first and written only when missing or different.
case "${BASH_VERSION:-}" in "" | [12].* | 3.[01].*) echo "$0: needs bash 3.2 or later (macOS's /bin/bash is 3.2), not ${BASH_VERSION:-sh}" >&2; exit 1 ;; esac
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") --project PROJECT_ID [options]

Options (each also read from the environment variable in brackets):
  --project ID                  project of the service, metrics, dashboard and policies [PROJECT_ID]
  --service NAME                Cloud Run service (default: runonce)                [SERVICE]
  --location REGION             Scheduler location, named in the runbooks (default: us-central1) [SCHEDULER_LOCATION]
  --jobs LIST                   comma-separated Scheduler job IDs that call runonce, for the
                                Scheduler-attempts metric and alert (optional)      [JOBS]
  --notification-channels LIST  comma-separated projects/P/notificationChannels/ID (optional) [NOTIFICATION_CHANNELS]
  --out DIR                     where the policy files are written (default: a temporary directory) [OUT]
  --create-alerts               also create the alert policies (gcloud alpha monitoring policies)
  -h, --help                    this help
USAGE
}

PROJECT_ID="${PROJECT_ID:-}"
SERVICE="${SERVICE:-runonce}"
LOCATION="${SCHEDULER_LOCATION:-us-central1}"
JOBS="${JOBS:-}"
NOTIFICATION_CHANNELS="${NOTIFICATION_CHANNELS:-}"
OUT="${OUT:-}"
CREATE_ALERTS=false

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project) PROJECT_ID="$(flag_value "$@")"; shift 2 ;;
    --service) SERVICE="$(flag_value "$@")"; shift 2 ;;
    --location) LOCATION="$(flag_value "$@")"; shift 2 ;;
    --jobs) JOBS="$(flag_value "$@")"; shift 2 ;;
    --notification-channels) NOTIFICATION_CHANNELS="$(flag_value "$@")"; shift 2 ;;
    --out) OUT="$(flag_value "$@")"; shift 2 ;;
    --create-alerts) CREATE_ALERTS=true; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

require "$PROJECT_ID" "--project (or PROJECT_ID)"
check_names "$PROJECT_ID" "(default)" "runonce_runs"
[[ "$SERVICE" =~ ^[a-z]([a-z0-9-]{0,47}[a-z0-9])?$ ]] || usage_error "--service must be a Cloud Run service name, got '$SERVICE'"
[[ "$LOCATION" =~ ^[a-z]+-[a-z]+[0-9]+$ ]] || usage_error "--location must be a region such as us-central1, got '$LOCATION'"
[[ -z "$JOBS" || "$JOBS" =~ ^[A-Za-z0-9_-]{1,500}(,[A-Za-z0-9_-]{1,500})*$ ]] ||
  usage_error "--jobs must be comma-separated Scheduler job IDs (letters, digits, '-', '_'), got '$JOBS'"
[[ -z "$NOTIFICATION_CHANNELS" || "$NOTIFICATION_CHANNELS" =~ ^projects/[^/,]+/notificationChannels/[0-9]+(,projects/[^/,]+/notificationChannels/[0-9]+)*$ ]] ||
  usage_error "--notification-channels must be comma-separated projects/P/notificationChannels/ID, got '$NOTIFICATION_CHANNELS'"

if [[ -z "$OUT" ]]; then
  OUT="$(mktemp -d)"
  $CREATE_ALERTS && trap 'rm -rf "$OUT"' EXIT
fi
"$PYTHON" "$DEPLOY_LIB/observability.py" "$OUT" "$SERVICE" "$PROJECT_ID" "$LOCATION" "$NOTIFICATION_CHANNELS" "$JOBS"

# 1. The log-based metrics the dashboard and the policies count, read in one list.
EXISTING_METRICS="$(gc logging metrics list --project="$PROJECT_ID" --format=json)"
for file in "$OUT"/metrics/*.json; do
  METRIC="runonce/$(basename "$file" .json)"
  EXISTING="$("$PYTHON" -c 'import json, sys; print(json.dumps(next((m for m in json.load(sys.stdin) if m["name"] in (sys.argv[1], sys.argv[1].replace("/", "%2F"))), None)))' "$METRIC" <<<"$EXISTING_METRICS")"
  if [[ "$EXISTING" != "null" ]]; then
    if "$PYTHON" "$DEPLOY_LIB/json_contains.py" "$(cat "$file")" <<<"$EXISTING"; then
      log "= log metric $METRIC is up to date"
    else
      log "~ update log metric $METRIC"
      gc logging metrics update "$METRIC" --project="$PROJECT_ID" --config-from-file="$file" --format='value(name)' >/dev/null
    fi
  else
    log "+ log metric $METRIC"
    gc logging metrics create "$METRIC" --project="$PROJECT_ID" --config-from-file="$file" --format='value(name)' >/dev/null
  fi
done

# 2. The dashboard, found by its display name (dashboards have generated IDs).
DASHBOARDS="$(gc monitoring dashboards list --project="$PROJECT_ID" --filter='displayName="runonce"' --format=json)"
read -r COUNT EXISTING_DASHBOARD <<<"$("$PYTHON" -c 'import json, sys; d = json.load(sys.stdin); print(len(d), d[0]["name"] if d else "")' <<<"$DASHBOARDS")"
if (( COUNT > 1 )); then
  log "! $COUNT dashboards are named 'runonce': delete all but one, then run again"
  exit 1
elif (( COUNT == 1 )); then
  if "$PYTHON" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)[0]))' <<<"$DASHBOARDS" |
    "$PYTHON" "$DEPLOY_LIB/json_contains.py" "$(cat "$OUT/dashboard.json")"; then
    log "= dashboard 'runonce' is up to date"
  else
    log "~ update dashboard $EXISTING_DASHBOARD"
    # an update names the version it replaces: the etag of the one just read
    "$PYTHON" -c 'import json, sys; d = json.load(open(sys.argv[1])); d["etag"] = json.load(sys.stdin)[0]["etag"]; json.dump(d, open(sys.argv[1], "w"))' \
      "$OUT/dashboard.json" <<<"$DASHBOARDS"
    gc monitoring dashboards update "$EXISTING_DASHBOARD" --project="$PROJECT_ID" --config-from-file="$OUT/dashboard.json" --format='value(name)' >/dev/null
  fi
else
  log "+ dashboard 'runonce'"
  gc monitoring dashboards create --project="$PROJECT_ID" --config-from-file="$OUT/dashboard.json" --format='value(name)' >/dev/null
fi

# 3. Alert policies: gcloud has them in its alpha track only.
if ! $CREATE_ALERTS; then
  log "alert policies: gcloud makes them in its alpha track only, so they were written to $OUT/policies; create them with:"
  for file in "$OUT"/policies/*.json; do
    printf 'gcloud alpha monitoring policies create --project=%s --policy-from-file=%s\n' "$PROJECT_ID" "$file"
  done
  log "(or run again with --create-alerts; terraform/alerts.tf makes them, and the no-progress ones, with the GA API)"
  exit 0
fi
# Policies have generated IDs: the display name finds ours, in one list of the project's policies.
POLICIES_ALL="$(gc alpha monitoring policies list --project="$PROJECT_ID" --format=json)" || {
  log "! cannot list alert policies: gcloud has them in its alpha track only (gcloud components install alpha)"
  exit 1
}
for file in "$OUT"/policies/*.json; do
  POLICY_NAME="$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["displayName"])' "$file")"
  POLICIES="$("$PYTHON" -c 'import json, sys; print(json.dumps([p for p in json.load(sys.stdin) if p.get("displayName") == sys.argv[1]]))' "$POLICY_NAME" <<<"$POLICIES_ALL")"
  read -r COUNT EXISTING_POLICY <<<"$("$PYTHON" -c 'import json, sys; p = json.load(sys.stdin); print(len(p), p[0]["name"] if p else "")' <<<"$POLICIES")"
  if (( COUNT > 1 )); then
    log "! $COUNT alert policies are named '$POLICY_NAME': delete all but one, then run again"
    exit 1
  elif (( COUNT == 1 )); then
    if "$PYTHON" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)[0]))' <<<"$POLICIES" |
      "$PYTHON" "$DEPLOY_LIB/json_contains.py" "$(cat "$file")"; then
      log "= alert policy '$POLICY_NAME' is up to date"
    else
      log "~ update alert policy $EXISTING_POLICY"
      gc alpha monitoring policies update "$EXISTING_POLICY" --project="$PROJECT_ID" --policy-from-file="$file" --format='value(name)' >/dev/null
    fi
  else
    log "+ alert policy '$POLICY_NAME'"
    gc alpha monitoring policies create --project="$PROJECT_ID" --policy-from-file="$file" --format='value(name)' >/dev/null
  fi
done
