#!/usr/bin/env bash
# Create or update one Cloud Scheduler job that calls a runonce route with an OIDC token of the
# invoker account. The attempt deadline and retries are checked against runonce's lease first (the
# retry rule, docs/concepts/retry-rule.md). Idempotent: an existing job with the same settings is
# left alone; one that differs is updated in place. With several locations, the same job is made in
# each, calling runonce in its own region (docs/how-to/two-regions.md).
case "${BASH_VERSION:-}" in "" | [12].* | 3.[01].*) echo "$0: needs bash 3.2 or later (macOS's /bin/bash is 3.2), not ${BASH_VERSION:-sh}" >&2; exit 1 ;; esac
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") --project PROJECT_ID --location REGION --job JOB_ID --route ROUTE --schedule CRON [options]

The job POSTs to SERVICE_URL/v1/routes/ROUTE:run?project=PROJECT_ID&location=REGION: the URL carries
the job's namespace, since Scheduler sends neither in its headers. --path replaces the route's path
(audit-job.sh: /v1/audit:run), and then --route is not needed.

--location REGION1,REGION2 makes the same job (same ID, schedule, body, retries) in each region, each
calling runonce in its own region (https://SERVICE-PROJECT_NUMBER.REGIONn.run.app, its OIDC audience),
and every one with location=REGION1 in its URL: all regions' deliveries of a fire time are one run.
Keep the first region first when adding one, and the runs keep their run_ids.

Options (each also read from the environment variable in brackets):
  --project ID                  project of the job (and of the service)            [PROJECT_ID]
  --location REGION[,REGION...] Scheduler location(s); the first keys the runs     [SCHEDULER_LOCATION, REGION]
  --job JOB_ID                  Scheduler job ID                                    [JOB]
  --route ROUTE                 runonce route name                                  [ROUTE]
  --path PATH                   path instead of /v1/routes/ROUTE:run (optional)     [TARGET_PATH]
  --schedule CRON               unix-cron, 5 fields (e.g. "0 3 * * *")              [SCHEDULE]
  --time-zone TZ                tz database name (default: Etc/UTC)                 [TIME_ZONE]
  --body JSON                   JSON object handed to the target (optional)         [BODY]
  --description TEXT            job description (optional)                          [DESCRIPTION]
  --service-url URL             runonce's URL and OIDC audience (default: the deterministic
                                https://SERVICE-PROJECT_NUMBER.SERVICE_REGION.run.app; one location only) [SERVICE_URL]
  --service NAME                service, to derive the URL (default: runonce)       [SERVICE]
  --service-region REGION       service region, to derive the URL (default: --location; one location only) [SERVICE_REGION]
  --invoker-sa ID|EMAIL         account whose OIDC token is sent (default: runonce-invoker) [INVOKER_SA]
  --attempt-deadline N          seconds Scheduler waits for an answer (default: 60) [ATTEMPT_DEADLINE]
  --retry-count N               0-5 (default: 5)                                    [RETRY_COUNT]
  --min-backoff N               seconds (default: 20)                               [MIN_BACKOFF]
  --max-backoff N               seconds (default: 300)                              [MAX_BACKOFF]
  --max-doublings N             default: 4                                          [MAX_DOUBLINGS]
  --max-retry-duration N        seconds, 0 = no limit (default: 0)                  [MAX_RETRY_DURATION]
  --lease-seconds N             the service's RUNONCE_LEASE_SECONDS (default: 300)  [LEASE_SECONDS]
  --dispatch-timeout-seconds N  the service's RUNONCE_DISPATCH_TIMEOUT_SECONDS (default: 30) [DISPATCH_TIMEOUT_SECONDS]
  --retention-seconds N         the service's RUNONCE_RETENTION_SECONDS (default: 86400) [RETENTION_SECONDS]
  --request-timeout N           the service's request timeout (default: 120)        [REQUEST_TIMEOUT]
  -h, --help                    this help
USAGE
}

PROJECT_ID="${PROJECT_ID:-}"
LOCATION="${SCHEDULER_LOCATION:-${REGION:-}}"
JOB="${JOB:-}"
ROUTE="${ROUTE:-}"
TARGET_PATH="${TARGET_PATH:-}"
SCHEDULE="${SCHEDULE:-}"
TIME_ZONE="${TIME_ZONE:-Etc/UTC}"
BODY="${BODY:-}"
DESCRIPTION="${DESCRIPTION:-}"
SERVICE_URL="${SERVICE_URL:-}"
SERVICE="${SERVICE:-runonce}"
SERVICE_REGION="${SERVICE_REGION:-}"
INVOKER_SA="${INVOKER_SA:-runonce-invoker}"
ATTEMPT_DEADLINE="${ATTEMPT_DEADLINE:-60}"
RETRY_COUNT="${RETRY_COUNT:-5}"
MIN_BACKOFF="${MIN_BACKOFF:-20}"
MAX_BACKOFF="${MAX_BACKOFF:-300}"
MAX_DOUBLINGS="${MAX_DOUBLINGS:-4}"
MAX_RETRY_DURATION="${MAX_RETRY_DURATION:-0}"
LEASE_SECONDS="${LEASE_SECONDS:-300}"
DISPATCH_TIMEOUT_SECONDS="${DISPATCH_TIMEOUT_SECONDS:-30}"
RETENTION_SECONDS="${RETENTION_SECONDS:-86400}"
REQUEST_TIMEOUT="${REQUEST_TIMEOUT:-120}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project) PROJECT_ID="$(flag_value "$@")"; shift 2 ;;
    --location) LOCATION="$(flag_value "$@")"; shift 2 ;;
    --job) JOB="$(flag_value "$@")"; shift 2 ;;
    --route) ROUTE="$(flag_value "$@")"; shift 2 ;;
    --path) TARGET_PATH="$(flag_value "$@")"; shift 2 ;;
    --schedule) SCHEDULE="$(flag_value "$@")"; shift 2 ;;
    --time-zone) TIME_ZONE="$(flag_value "$@")"; shift 2 ;;
    --body) BODY="$(flag_value "$@")"; shift 2 ;;
    --description) DESCRIPTION="$(flag_value "$@")"; shift 2 ;;
    --service-url) SERVICE_URL="$(flag_value "$@")"; shift 2 ;;
    --service) SERVICE="$(flag_value "$@")"; shift 2 ;;
    --service-region) SERVICE_REGION="$(flag_value "$@")"; shift 2 ;;
    --invoker-sa) INVOKER_SA="$(flag_value "$@")"; shift 2 ;;
    --attempt-deadline) ATTEMPT_DEADLINE="$(flag_value "$@")"; shift 2 ;;
    --retry-count) RETRY_COUNT="$(flag_value "$@")"; shift 2 ;;
    --min-backoff) MIN_BACKOFF="$(flag_value "$@")"; shift 2 ;;
    --max-backoff) MAX_BACKOFF="$(flag_value "$@")"; shift 2 ;;
    --max-doublings) MAX_DOUBLINGS="$(flag_value "$@")"; shift 2 ;;
    --max-retry-duration) MAX_RETRY_DURATION="$(flag_value "$@")"; shift 2 ;;
    --lease-seconds) LEASE_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --dispatch-timeout-seconds) DISPATCH_TIMEOUT_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --retention-seconds) RETENTION_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --request-timeout) REQUEST_TIMEOUT="$(flag_value "$@")"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

require "$PROJECT_ID" "--project (or PROJECT_ID)"
require "$LOCATION" "--location (or SCHEDULER_LOCATION / REGION)"
IFS=, read -r -a LOCATIONS <<<"$LOCATION"
for location in ${LOCATIONS[@]+"${LOCATIONS[@]}"}; do
  [[ "$location" =~ ^[a-z][a-z0-9-]*[a-z0-9]$ ]] || usage_error "--location must be a region or a comma-separated list of regions (e.g. us-central1,us-east1), got '$LOCATION'"
done
if (( ${#LOCATIONS[@]} != $(printf '%s\n' ${LOCATIONS[@]+"${LOCATIONS[@]}"} | sort -u | wc -l) )); then
  usage_error "--location lists a region twice: '$LOCATION'"
fi
if (( ${#LOCATIONS[@]} > 1 )) && [[ -n "$SERVICE_URL$SERVICE_REGION" ]]; then
  usage_error "--service-url and --service-region name one service; with several locations each job calls runonce in its own region"
fi
KEY_LOCATION="${LOCATIONS[0]}"
require "$JOB" "--job (or JOB)"
[[ "$JOB" =~ ^[A-Za-z0-9_-]{1,500}$ ]] || usage_error "--job may contain only letters, digits, '-' and '_', got '$JOB'"
if [[ -z "$TARGET_PATH" ]]; then
  require "$ROUTE" "--route (or ROUTE)"
  [[ "$ROUTE" =~ ^[a-z0-9][a-z0-9_-]{0,62}$ ]] || usage_error "--route must be 1-63 lower-case letters, digits, '-' or '_', got '$ROUTE'"
  TARGET_PATH="/v1/routes/$ROUTE:run"
fi
[[ "$TARGET_PATH" =~ ^/v1/[A-Za-z0-9_/:.-]+$ ]] || usage_error "--path must be a runonce path such as /v1/audit:run, got '$TARGET_PATH'"
(( $(wc -w <<<"$SCHEDULE") == 5 )) || usage_error "--schedule must be a unix-cron expression with 5 fields (e.g. \"0 3 * * *\"), got '$SCHEDULE'"
[[ "$TIME_ZONE" =~ ^(UTC|[A-Za-z]+(/[A-Za-z0-9_+-]+)+)$ ]] || usage_error "--time-zone must be a tz database name such as Europe/Paris, got '$TIME_ZONE'"
if [[ -n "$BODY" ]]; then
  "$PYTHON" -c 'import json, sys; assert isinstance(json.loads(sys.argv[1]), dict)' "$BODY" 2>/dev/null ||
    usage_error "--body must be a JSON object, got '$BODY'"
fi
for pair in "ATTEMPT_DEADLINE:$ATTEMPT_DEADLINE" "RETRY_COUNT:$RETRY_COUNT" "MIN_BACKOFF:$MIN_BACKOFF" \
  "MAX_BACKOFF:$MAX_BACKOFF" "MAX_DOUBLINGS:$MAX_DOUBLINGS" "MAX_RETRY_DURATION:$MAX_RETRY_DURATION" \
  "LEASE_SECONDS:$LEASE_SECONDS" "DISPATCH_TIMEOUT_SECONDS:$DISPATCH_TIMEOUT_SECONDS" \
  "RETENTION_SECONDS:$RETENTION_SECONDS" "REQUEST_TIMEOUT:$REQUEST_TIMEOUT"; do
  require_int "${pair#*:}" "${pair%%:*}"
done
RETRY_WINDOW="$(check_retry_rule "$ATTEMPT_DEADLINE" "$RETRY_COUNT" "$MIN_BACKOFF" "$MAX_BACKOFF" "$MAX_DOUBLINGS" \
  "$MAX_RETRY_DURATION" "$LEASE_SECONDS" "$DISPATCH_TIMEOUT_SECONDS" "$RETENTION_SECONDS" "$REQUEST_TIMEOUT")"
read -r WINDOW LONGEST <<<"$RETRY_WINDOW"
log "retries span ${WINDOW}s to ${LONGEST}s after the first attempt (runonce/scheduler_retry.py)"

INVOKER_EMAIL="$(sa_email "$INVOKER_SA" "$PROJECT_ID")"

# apply_job LOCATION: the job in LOCATION, calling the service of SERVICE_URL (or of LOCATION's region).
apply_job() {
  local LOCATION="$1" SERVICE_URL="$SERVICE_URL"
  SERVICE_URL="${SERVICE_URL:-$(service_url "$SERVICE" "$PROJECT_ID" "${SERVICE_REGION:-$LOCATION}")}"
  SERVICE_URL="${SERVICE_URL%/}"
  local URI="$SERVICE_URL$TARGET_PATH?project=$PROJECT_ID&location=$KEY_LOCATION"

  local SETTINGS=(
    --schedule="$SCHEDULE"
    --time-zone="$TIME_ZONE"
    --uri="$URI"
    --http-method=POST
    --oidc-service-account-email="$INVOKER_EMAIL"
    --oidc-token-audience="$SERVICE_URL"
    --attempt-deadline="${ATTEMPT_DEADLINE}s"
    --max-retry-attempts="$RETRY_COUNT"
    --min-backoff="${MIN_BACKOFF}s"
    --max-backoff="${MAX_BACKOFF}s"
    --max-doublings="$MAX_DOUBLINGS"
    --max-retry-duration="${MAX_RETRY_DURATION}s"
    --description="$DESCRIPTION"
  )
  local WANTED EXISTING BODY_FLAGS=()
  # The job as the API would return it, to compare with the existing one.
  WANTED="$("$PYTHON" - "$SCHEDULE" "$TIME_ZONE" "$URI" "$INVOKER_EMAIL" "$SERVICE_URL" "$ATTEMPT_DEADLINE" \
    "$RETRY_COUNT" "$MIN_BACKOFF" "$MAX_BACKOFF" "$MAX_DOUBLINGS" "$MAX_RETRY_DURATION" "$BODY" "$DESCRIPTION" <<'PY'
import base64, json, sys
(schedule, tz, uri, email, audience, deadline, count, min_b, max_b, doublings, max_d, body, description) = sys.argv[1:]
http = {"uri": uri, "httpMethod": "POST", "oidcToken": {"serviceAccountEmail": email, "audience": audience}}
if body:
    http["body"] = base64.b64encode(body.encode()).decode()
    http["headers"] = {"Content-Type": "application/json"}
print(json.dumps({
    "schedule": schedule, "timeZone": tz, "description": description, "attemptDeadline": f"{deadline}s",
    "httpTarget": http,
    "retryConfig": {"retryCount": int(count), "minBackoffDuration": f"{min_b}s", "maxBackoffDuration": f"{max_b}s",
                    "maxDoublings": int(doublings), "maxRetryDuration": f"{max_d}s"},
}))
PY
  )"

  local JOB_ARGS=("$JOB" --location="$LOCATION" --project="$PROJECT_ID")
  if EXISTING="$(gc scheduler jobs describe ${JOB_ARGS[@]+"${JOB_ARGS[@]}"} --format=json 2>/dev/null)"; then
    if "$PYTHON" "$DEPLOY_LIB/job_matches.py" "$WANTED" <<<"$EXISTING"; then
      log "= Scheduler job $JOB in $LOCATION is up to date (retries span ${WINDOW}s)"
    else
      log "~ update Scheduler job $JOB in $LOCATION"
      if [[ -n "$BODY" ]]; then
        BODY_FLAGS=(--message-body="$BODY" --update-headers=Content-Type=application/json)
      else
        BODY_FLAGS=(--clear-message-body --clear-headers)
      fi
      gc scheduler jobs update http ${JOB_ARGS[@]+"${JOB_ARGS[@]}"} ${SETTINGS[@]+"${SETTINGS[@]}"} ${BODY_FLAGS[@]+"${BODY_FLAGS[@]}"} --format='value(name)' >/dev/null
    fi
  else
    log "+ create Scheduler job $JOB in $LOCATION ($SCHEDULE $TIME_ZONE -> $URI, retries span ${WINDOW}s)"
    [[ -z "$BODY" ]] || BODY_FLAGS=(--message-body="$BODY" --headers=Content-Type=application/json)
    gc scheduler jobs create http ${JOB_ARGS[@]+"${JOB_ARGS[@]}"} ${SETTINGS[@]+"${SETTINGS[@]}"} ${BODY_FLAGS[@]+"${BODY_FLAGS[@]}"} --format='value(name)' >/dev/null
  fi
}

for location in ${LOCATIONS[@]+"${LOCATIONS[@]}"}; do
  apply_job "$location"
done
