#!/usr/bin/env bash
# After a real deploy: prove the path Scheduler -> Cloud Run -> runonce end to end, once.
# Creates (or reuses) a throwaway Scheduler job against a `log` route, forces two runs of it, reads
# the run back through runonce's admin API with an identity token, prints one line per check, and
# deletes the job. Exit 0 when every check passed, 1 when one failed (the line says what to do).
case "${BASH_VERSION:-}" in "" | [12].* | 3.[01].*) echo "$0: needs bash 3.2 or later (macOS's /bin/bash is 3.2), not ${BASH_VERSION:-sh}" >&2; exit 1 ;; esac
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") --project PROJECT_ID --region REGION [options]

What it proves: the invoker's OIDC token reaches runonce in Authorization with its signature
intact and is accepted; a forced run is recorded once (completed, one attempt); the same run
delivered again is a duplicate (the record is unchanged). What it cannot prove: that your own
routes' targets work, or the Workflows label filter (run a workflows route once and look).

Options (each also read from the environment variable in brackets):
  --project ID              project of the service and the job                 [PROJECT_ID]
  --region REGION           Cloud Run region                                    [REGION]
  --location REGION         Scheduler location (default: --region)              [SCHEDULER_LOCATION]
  --route ROUTE             a route of type log in the deployed routes (default: demo) [ROUTE]
  --job JOB_ID              the throwaway job (default: runonce-smoke)          [JOB]
  --service NAME            service, to derive the URL (default: runonce)       [SERVICE]
  --service-url URL         runonce's URL and OIDC audience (default: the deterministic
                            https://SERVICE-PROJECT_NUMBER.REGION.run.app)      [SERVICE_URL]
  --invoker-sa ID|EMAIL     the job's OIDC account (default: runonce-invoker)   [INVOKER_SA]
  --reader-sa ID|EMAIL      account whose identity token reads GET /v1/runs; it must be in
                            RUNONCE_ADMIN_CALLERS and may invoke the service, and you need
                            roles/iam.serviceAccountOpenIdTokenCreator on it (audit-job.sh
                            --token-creators) (default: runonce-auditor, the audit's account) [READER_SA]
  --wait-seconds N          how long to wait for each delivery (default: 120)   [WAIT_SECONDS]
  -h, --help                this help

Computing the run_id needs runonce's CLI: .venv/bin/runonce from 'make run', or RUNONCE=PATH.
USAGE
}

PROJECT_ID="${PROJECT_ID:-}"
REGION="${REGION:-}"
LOCATION="${SCHEDULER_LOCATION:-}"
ROUTE="${ROUTE:-demo}"
JOB="${JOB:-runonce-smoke}"
SERVICE="${SERVICE:-runonce}"
SERVICE_URL="${SERVICE_URL:-}"
INVOKER_SA="${INVOKER_SA:-runonce-invoker}"
READER_SA="${READER_SA:-runonce-auditor}"
WAIT_SECONDS="${WAIT_SECONDS:-120}"
RUNONCE="${RUNONCE:-$DEPLOY_LIB/../../.venv/bin/runonce}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project) PROJECT_ID="$(flag_value "$@")"; shift 2 ;;
    --region) REGION="$(flag_value "$@")"; shift 2 ;;
    --location) LOCATION="$(flag_value "$@")"; shift 2 ;;
    --route) ROUTE="$(flag_value "$@")"; shift 2 ;;
    --job) JOB="$(flag_value "$@")"; shift 2 ;;
    --service) SERVICE="$(flag_value "$@")"; shift 2 ;;
    --service-url) SERVICE_URL="$(flag_value "$@")"; shift 2 ;;
    --invoker-sa) INVOKER_SA="$(flag_value "$@")"; shift 2 ;;
    --reader-sa) READER_SA="$(flag_value "$@")"; shift 2 ;;
    --wait-seconds) WAIT_SECONDS="$(flag_value "$@")"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

require "$PROJECT_ID" "--project (or PROJECT_ID)"
require "$REGION" "--region (or REGION)"
LOCATION="${LOCATION:-$REGION}"
[[ "$JOB" =~ ^[A-Za-z0-9_-]{1,500}$ ]] || usage_error "--job may contain only letters, digits, '-' and '_', got '$JOB'"
[[ "$ROUTE" =~ ^[a-z0-9][a-z0-9_-]{0,62}$ ]] || usage_error "--route must be a route name, got '$ROUTE'"
require_int "$WAIT_SECONDS" "--wait-seconds"
if ! command -v "$RUNONCE" >/dev/null; then
  RUNONCE="$(command -v runonce || true)"
  [[ -n "$RUNONCE" ]] || usage_error "runonce's CLI is needed to compute the run_id: run 'make run' once, or set RUNONCE=PATH"
fi
command -v curl >/dev/null || usage_error "curl is required"

INVOKER_EMAIL="$(sa_email "$INVOKER_SA" "$PROJECT_ID")"
READER_EMAIL="$(sa_email "$READER_SA" "$PROJECT_ID")"
SERVICE_URL="${SERVICE_URL:-$(service_url "$SERVICE" "$PROJECT_ID" "$REGION")}"
SERVICE_URL="${SERVICE_URL%/}"
JOB_ARGS=("$JOB" --location="$LOCATION" --project="$PROJECT_ID")
FAILED=0

pass() { printf 'ok    %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; FAILED=1; }

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() { gc scheduler jobs delete ${JOB_ARGS[@]+"${JOB_ARGS[@]}"} >/dev/null 2>&1 || true; }

# last attempt time and status code of the job ("" and 0 before any attempt, or on success)
attempt_state() {
  gc scheduler jobs describe ${JOB_ARGS[@]+"${JOB_ARGS[@]}"} --format='value(lastAttemptTime,status.code)'
}

# force_run: run the job, wait until Scheduler records the attempt; prints the status code (0 = 2xx)
force_run() {
  local before now code waited=0
  before="$(attempt_state | cut -f1)"
  gc scheduler jobs run ${JOB_ARGS[@]+"${JOB_ARGS[@]}"} >/dev/null
  while (( waited < WAIT_SECONDS )); do
    IFS=$'\t' read -r now code <<<"$(attempt_state)" || true
    if [[ -n "$now" && "$now" != "$before" ]]; then
      printf '%s' "${code:-0}"
      return 0
    fi
    sleep 2
    waited=$(( waited + 2 ))
  done
  printf 'timeout'
}

read_run() { # prints the record's "status attempts attempt_id updated_at", or the HTTP status
  "$PYTHON" - "$1" <<'PY'
import json, sys
try:
    record = json.loads(sys.argv[1])
    print(record["status"], record["attempts"], record["attempt_id"], record["updated_at"])
except (ValueError, KeyError, TypeError):
    print("unreadable")
PY
}

trap cleanup EXIT
if gc scheduler jobs describe ${JOB_ARGS[@]+"${JOB_ARGS[@]}"} --format='value(name)' >/dev/null 2>&1; then
  log "= reusing Scheduler job $JOB"
else
  log "+ Scheduler job $JOB -> $SERVICE_URL/v1/routes/$ROUTE:run (once a year: only forced runs matter)"
  gc scheduler jobs create http ${JOB_ARGS[@]+"${JOB_ARGS[@]}"} --schedule="0 0 1 1 *" --time-zone=Etc/UTC \
    --uri="$SERVICE_URL/v1/routes/$ROUTE:run?project=$PROJECT_ID&location=$LOCATION" --http-method=POST \
    --oidc-service-account-email="$INVOKER_EMAIL" --oidc-token-audience="$SERVICE_URL" \
    --attempt-deadline=60s --max-retry-attempts=0 --description="runonce smoke test (deploy/smoke.sh); safe to delete" \
    --format='value(name)' >/dev/null
fi
SCHEDULE_TIME="$(gc scheduler jobs describe ${JOB_ARGS[@]+"${JOB_ARGS[@]}"} --format='value(scheduleTime)')"
# `runonce key` reads routes as `serve` does; the deployed routes are not here, so describe the one
# log route the job calls (the namespace is given explicitly, as the job's URI gives it).
RUN_ID="$(RUNONCE_ROUTES_FILE='' RUNONCE_ROUTES="{\"routes\": {\"$ROUTE\": {\"target\": {\"type\": \"log\"}}}}" \
  "$RUNONCE" key --route "$ROUTE" --job "$JOB" --schedule-time "$SCHEDULE_TIME" --forced \
  --project "$PROJECT_ID" --location "$LOCATION")"
log "a forced run carries X-CloudScheduler-ScheduleTime $SCHEDULE_TIME: run_id $RUN_ID"

TOKEN="$(gc auth print-identity-token --impersonate-service-account="$READER_EMAIL" --audiences="$SERVICE_URL" \
  --include-email)" || usage_error "cannot mint an identity token for $READER_EMAIL: you need roles/iam.serviceAccountOpenIdTokenCreator on it (audit-job.sh --token-creators user:YOU, or Terraform's auditor_token_creators)"
RECORD_FILE="$(mktemp)"
trap 'cleanup; rm -f "$RECORD_FILE"' EXIT
fetch_run() { # prints the HTTP status; the body goes to $RECORD_FILE
  curl -sS -o "$RECORD_FILE" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$SERVICE_URL/v1/runs/$RUN_ID" || printf '000'
}

code="$(force_run)"
case "$code" in
  0) pass "token accepted: Scheduler's OIDC token reached runonce in Authorization and verified (2xx)" ;;
  16) fail "token refused (401): the signature did not survive to runonce (Cloud Run's invoker check may strip it); redeploy with deploy-service.sh --auth cloud_run_iam (Terraform: auth = \"cloud_run_iam\"), see docs/how-to/iam.md" ;;
  7) fail "caller refused (403): Cloud Run IAM or runonce's allow-list refused $INVOKER_EMAIL; check its roles/run.invoker and RUNONCE_ALLOWED_CALLERS" ;;
  timeout) fail "no attempt recorded by Scheduler within ${WAIT_SECONDS}s: check the job in the console, then the service's logs" ;;
  *) fail "the delivery failed (gRPC status code $code in the job's status): read the service's logs for route $ROUTE" ;;
esac

status="$(fetch_run)"
if [[ "$status" == 200 ]]; then
  read -r run_status attempts attempt_id updated_at <<<"$(read_run "$(cat "$RECORD_FILE")")"
  if [[ "$run_status" == completed && "$attempts" == 1 ]]; then
    pass "one run recorded: $RUN_ID completed after 1 attempt"
  else
    fail "run $RUN_ID is $run_status after $attempts attempt(s), expected completed after 1: see 'runonce runs show $RUN_ID'"
  fi
else
  attempt_id="" updated_at=""
  fail "GET /v1/runs/$RUN_ID answered $status: 404 = the run was not recorded; 401/403 = $READER_EMAIL must be in RUNONCE_ADMIN_CALLERS"
fi

code="$(force_run)"
status="$(fetch_run)"
if [[ "$code" == 0 && "$status" == 200 ]] &&
  [[ "$(read_run "$(cat "$RECORD_FILE")")" == "completed 1 $attempt_id $updated_at" ]]; then
  pass "second delivery a duplicate: the same run, not run again (record unchanged)"
else
  fail "second delivery: Scheduler status $code, GET /v1/runs answered $status; the record changed or is missing: a duplicate ran again?"
fi

log "deleting Scheduler job $JOB"
exit "$FAILED"
