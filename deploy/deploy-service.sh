#!/usr/bin/env bash
# Deploy (or update) the runonce Cloud Run service: private (--no-allow-unauthenticated), running as
# the runtime account, its routes and settings as environment; then let the invoker account call it.
# Idempotent: the deployed configuration's fingerprint is kept in a service label, and an unchanged
# configuration is not deployed again (no new revision); use --force to deploy anyway.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") --project PROJECT_ID --region REGION --image IMAGE --routes-file FILE [options]

Options (each also read from the environment variable in brackets):
  --project ID                  project hosting runonce                           [PROJECT_ID]
  --region REGION               Cloud Run region                                   [REGION]
  --image IMAGE                 image built from the Dockerfile (by digest, ideally) [IMAGE]
  --routes-file FILE            routes file (YAML or JSON), passed as RUNONCE_ROUTES [ROUTES_FILE]
  --service NAME                Cloud Run service (default: runonce)               [SERVICE]
  --runtime-sa ID|EMAIL         runtime account (default: runonce)                 [RUNTIME_SA]
  --invoker-sa ID|EMAIL         the only account allowed to call (default: runonce-invoker) [INVOKER_SA]
  --firestore-database NAME     default: (default)                                [FIRESTORE_DATABASE]
  --firestore-collection NAME   default: runonce_runs                              [FIRESTORE_COLLECTION]
  --lease-seconds N             RUNONCE_LEASE_SECONDS (default: 300)               [LEASE_SECONDS]
  --dispatch-timeout-seconds N  RUNONCE_DISPATCH_TIMEOUT_SECONDS (default: 30)     [DISPATCH_TIMEOUT_SECONDS]
  --retention-seconds N         RUNONCE_RETENTION_SECONDS (default: 86400)         [RETENTION_SECONDS]
  --request-timeout N           Cloud Run request timeout, seconds (default: 120)  [REQUEST_TIMEOUT]
  --min-instances N             default: 0                                         [MIN_INSTANCES]
  --max-instances N             default: 10                                        [MAX_INSTANCES]
  --ingress all|internal|internal-and-cloud-load-balancing  default: all           [INGRESS]
  --force                       deploy even if the configuration is unchanged
  -h, --help                    this help
USAGE
}

PROJECT_ID="${PROJECT_ID:-}"
REGION="${REGION:-}"
IMAGE="${IMAGE:-}"
ROUTES_FILE="${ROUTES_FILE:-}"
SERVICE="${SERVICE:-runonce}"
RUNTIME_SA="${RUNTIME_SA:-runonce}"
INVOKER_SA="${INVOKER_SA:-runonce-invoker}"
FIRESTORE_DATABASE="${FIRESTORE_DATABASE:-(default)}"
FIRESTORE_COLLECTION="${FIRESTORE_COLLECTION:-runonce_runs}"
LEASE_SECONDS="${LEASE_SECONDS:-300}"
DISPATCH_TIMEOUT_SECONDS="${DISPATCH_TIMEOUT_SECONDS:-30}"
RETENTION_SECONDS="${RETENTION_SECONDS:-86400}"
REQUEST_TIMEOUT="${REQUEST_TIMEOUT:-120}"
MIN_INSTANCES="${MIN_INSTANCES:-0}"
MAX_INSTANCES="${MAX_INSTANCES:-10}"
INGRESS="${INGRESS:-all}"
FORCE=false

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project) PROJECT_ID="$(flag_value "$@")"; shift 2 ;;
    --region) REGION="$(flag_value "$@")"; shift 2 ;;
    --image) IMAGE="$(flag_value "$@")"; shift 2 ;;
    --routes-file) ROUTES_FILE="$(flag_value "$@")"; shift 2 ;;
    --service) SERVICE="$(flag_value "$@")"; shift 2 ;;
    --runtime-sa) RUNTIME_SA="$(flag_value "$@")"; shift 2 ;;
    --invoker-sa) INVOKER_SA="$(flag_value "$@")"; shift 2 ;;
    --firestore-database) FIRESTORE_DATABASE="$(flag_value "$@")"; shift 2 ;;
    --firestore-collection) FIRESTORE_COLLECTION="$(flag_value "$@")"; shift 2 ;;
    --lease-seconds) LEASE_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --dispatch-timeout-seconds) DISPATCH_TIMEOUT_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --retention-seconds) RETENTION_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --request-timeout) REQUEST_TIMEOUT="$(flag_value "$@")"; shift 2 ;;
    --min-instances) MIN_INSTANCES="$(flag_value "$@")"; shift 2 ;;
    --max-instances) MAX_INSTANCES="$(flag_value "$@")"; shift 2 ;;
    --ingress) INGRESS="$(flag_value "$@")"; shift 2 ;;
    --force) FORCE=true; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

require "$PROJECT_ID" "--project (or PROJECT_ID)"
require "$REGION" "--region (or REGION)"
require "$IMAGE" "--image (or IMAGE)"
require "$ROUTES_FILE" "--routes-file (or ROUTES_FILE)"
[[ -r "$ROUTES_FILE" ]] || usage_error "routes file '$ROUTES_FILE' cannot be read"
for pair in "LEASE_SECONDS:$LEASE_SECONDS" "DISPATCH_TIMEOUT_SECONDS:$DISPATCH_TIMEOUT_SECONDS" \
  "RETENTION_SECONDS:$RETENTION_SECONDS" "REQUEST_TIMEOUT:$REQUEST_TIMEOUT" \
  "MIN_INSTANCES:$MIN_INSTANCES" "MAX_INSTANCES:$MAX_INSTANCES"; do
  require_int "${pair#*:}" "${pair%%:*}"
done
(( DISPATCH_TIMEOUT_SECONDS < LEASE_SECONDS )) ||
  usage_error "--dispatch-timeout-seconds ($DISPATCH_TIMEOUT_SECONDS) must be below --lease-seconds ($LEASE_SECONDS)"
[[ "$INGRESS" =~ ^(all|internal|internal-and-cloud-load-balancing)$ ]] ||
  usage_error "--ingress must be all, internal or internal-and-cloud-load-balancing"
"$PYTHON" "$DEPLOY_LIB/routes_iam.py" "$ROUTES_FILE" >/dev/null # validates the routes file

RUNTIME_EMAIL="$(sa_email "$RUNTIME_SA" "$PROJECT_ID")"
INVOKER_EMAIL="$(sa_email "$INVOKER_SA" "$PROJECT_ID")"
URL="$(service_url "$SERVICE" "$PROJECT_ID" "$REGION")"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
ENV_FILE="$WORK/env.yaml"
{
  echo "RUNONCE_STORE: firestore"
  echo "RUNONCE_FIRESTORE_PROJECT: \"$PROJECT_ID\""
  echo "RUNONCE_FIRESTORE_DATABASE: \"$FIRESTORE_DATABASE\""
  echo "RUNONCE_FIRESTORE_COLLECTION: \"$FIRESTORE_COLLECTION\""
  echo "RUNONCE_AUTH: oidc"
  echo "RUNONCE_AUDIENCE: \"$URL\""
  echo "RUNONCE_ALLOWED_CALLERS: \"$INVOKER_EMAIL\""
  echo "RUNONCE_LEASE_SECONDS: \"$LEASE_SECONDS\""
  echo "RUNONCE_DISPATCH_TIMEOUT_SECONDS: \"$DISPATCH_TIMEOUT_SECONDS\""
  echo "RUNONCE_RETENTION_SECONDS: \"$RETENTION_SECONDS\""
  echo "RUNONCE_ROUTES: |"
  sed 's/^/  /' "$ROUTES_FILE"
} >"$ENV_FILE"

DEPLOY_FLAGS=(
  --image="$IMAGE"
  --region="$REGION"
  --project="$PROJECT_ID"
  --service-account="$RUNTIME_EMAIL"
  --no-allow-unauthenticated
  --ingress="$INGRESS"
  --port=8080
  --timeout="$REQUEST_TIMEOUT"
  --concurrency=80
  --min-instances="$MIN_INSTANCES"
  --max-instances="$MAX_INSTANCES"
  --cpu-boost
)
# Label values allow [a-z0-9_-]{0,63}: the first 32 hex digits of the configuration's sha256.
FINGERPRINT="$({ printf '%s\n' "$SERVICE" "${DEPLOY_FLAGS[@]}"; cat "$ENV_FILE"; } | sha256sum | cut -c1-32)"
DEPLOY_FLAGS+=(--env-vars-file="$ENV_FILE") # its temporary path stays out of the fingerprint

CURRENT="$(gc run services describe "$SERVICE" --region="$REGION" --project="$PROJECT_ID" \
  --format='value(metadata.labels.runonce-config)' 2>/dev/null || true)"
if [[ "$CURRENT" == "$FINGERPRINT" && "$FORCE" == false ]]; then
  log "= service $SERVICE is up to date (configuration $FINGERPRINT)"
else
  log "+ deploy service $SERVICE ($IMAGE) in $REGION"
  gc run deploy "$SERVICE" "${DEPLOY_FLAGS[@]}" --update-labels="runonce-config=$FINGERPRINT" >&2
fi

ensure_binding roles/run.invoker "serviceAccount:$INVOKER_EMAIL" "" "" run services -- "$SERVICE" \
  --region="$REGION" --project="$PROJECT_ID"

log "done: $URL (callable by $INVOKER_EMAIL only)"
printf '%s\n' "$URL"
