#!/usr/bin/env bash
# Deploy (or update) the runonce Cloud Run service: private (--no-allow-unauthenticated), running as
# the runtime account, its routes and settings as environment; then let the invoker account call it.
# Idempotent: the deployed configuration's fingerprint is kept in a service label, and an unchanged
# configuration is not deployed again (no new revision); use --force to deploy anyway.
case "${BASH_VERSION:-}" in "" | [12].* | 3.[01].*) echo "$0: needs bash 3.2 or later (macOS's /bin/bash is 3.2), not ${BASH_VERSION:-sh}" >&2; exit 1 ;; esac
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") --project PROJECT_ID --region REGION --image IMAGE --routes-file FILE [options]

Options (each also read from the environment variable in brackets):
  --project ID                  project hosting runonce                           [PROJECT_ID]
  --region REGION               Cloud Run region                                   [REGION]
  --image IMAGE                 image built from the Dockerfile: REGION-docker.pkg.dev/... (a tag is
                                resolved to its digest) or IMAGE@sha256:...         [IMAGE]
  --routes-file FILE            routes file (YAML or JSON), passed as RUNONCE_ROUTES [ROUTES_FILE]
  --service NAME                Cloud Run service (default: runonce)               [SERVICE]
  --runtime-sa ID|EMAIL         runtime account (default: runonce)                 [RUNTIME_SA]
  --invoker-sa ID|EMAIL         the only account allowed to call (default: runonce-invoker) [INVOKER_SA]
  --admin-callers EMAILS        RUNONCE_ADMIN_CALLERS, comma-separated: the runs API, the audit and
                                backfill (audit-job.sh's runonce-auditor@PROJECT...) [ADMIN_CALLERS]
  --store URL                   RUNONCE_STORE: firestore (default), spanner://projects/P/instances/I/databases/D[?table=T]
                                or redis[s]://[:PASSWORD@]HOST:PORT/DB[?ca_file=PATH] (a Memorystore
                                instance: needs --network)                         [STORE]
  --network NETWORK             Direct VPC egress through this VPC network, private ranges only
                                (required for Memorystore, which has only a private address) [NETWORK]
  --subnet SUBNET               the network's subnet for the egress (default: Cloud Run's choice) [SUBNET]
  --firestore-database NAME     default: (default)                                [FIRESTORE_DATABASE]
  --firestore-collection NAME   default: runonce_runs                              [FIRESTORE_COLLECTION]
  --lease-seconds N             RUNONCE_LEASE_SECONDS (default: 300)               [LEASE_SECONDS]
  --dispatch-timeout-seconds N  RUNONCE_DISPATCH_TIMEOUT_SECONDS (default: 30)     [DISPATCH_TIMEOUT_SECONDS]
  --retention-seconds N         RUNONCE_RETENTION_SECONDS (default: 86400)         [RETENTION_SECONDS]
  --request-timeout N           Cloud Run request timeout, seconds (default: 120)  [REQUEST_TIMEOUT]
  --min-instances N             default: 0                                         [MIN_INSTANCES]
  --max-instances N             default: 10                                        [MAX_INSTANCES]
  --ingress internal|all|internal-and-cloud-load-balancing  default: internal      [INGRESS]
                                internal admits Scheduler and Tasks of this project (or its VPC-SC
                                perimeter); use all when jobs in other projects call runonce
  --auth oidc|cloud_run_iam     RUNONCE_AUTH (default: oidc). cloud_run_iam trusts Cloud Run's invoker
                                check instead of verifying the token's signature (docs/how-to/iam.md);
                                the runtime account then gets run.services.get and .getIamPolicy
                                on this service, which runonce checks at start-up   [AUTH]
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
ADMIN_CALLERS="${ADMIN_CALLERS:-}"
STORE="${STORE:-firestore}"
NETWORK="${NETWORK:-}"
SUBNET="${SUBNET:-}"
FIRESTORE_DATABASE="${FIRESTORE_DATABASE:-(default)}"
FIRESTORE_COLLECTION="${FIRESTORE_COLLECTION:-runonce_runs}"
LEASE_SECONDS="${LEASE_SECONDS:-300}"
DISPATCH_TIMEOUT_SECONDS="${DISPATCH_TIMEOUT_SECONDS:-30}"
RETENTION_SECONDS="${RETENTION_SECONDS:-86400}"
REQUEST_TIMEOUT="${REQUEST_TIMEOUT:-120}"
MIN_INSTANCES="${MIN_INSTANCES:-0}"
MAX_INSTANCES="${MAX_INSTANCES:-10}"
INGRESS="${INGRESS:-internal}"
AUTH="${AUTH:-oidc}"
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
    --admin-callers) ADMIN_CALLERS="$(flag_value "$@")"; shift 2 ;;
    --store) STORE="$(flag_value "$@")"; shift 2 ;;
    --network) NETWORK="$(flag_value "$@")"; shift 2 ;;
    --subnet) SUBNET="$(flag_value "$@")"; shift 2 ;;
    --firestore-database) FIRESTORE_DATABASE="$(flag_value "$@")"; shift 2 ;;
    --firestore-collection) FIRESTORE_COLLECTION="$(flag_value "$@")"; shift 2 ;;
    --lease-seconds) LEASE_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --dispatch-timeout-seconds) DISPATCH_TIMEOUT_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --retention-seconds) RETENTION_SECONDS="$(flag_value "$@")"; shift 2 ;;
    --request-timeout) REQUEST_TIMEOUT="$(flag_value "$@")"; shift 2 ;;
    --min-instances) MIN_INSTANCES="$(flag_value "$@")"; shift 2 ;;
    --max-instances) MAX_INSTANCES="$(flag_value "$@")"; shift 2 ;;
    --ingress) INGRESS="$(flag_value "$@")"; shift 2 ;;
    --auth) AUTH="$(flag_value "$@")"; shift 2 ;;
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
check_lease_rule "$LEASE_SECONDS" "$DISPATCH_TIMEOUT_SECONDS" "$RETENTION_SECONDS"
[[ "$INGRESS" =~ ^(all|internal|internal-and-cloud-load-balancing)$ ]] ||
  usage_error "--ingress must be all, internal or internal-and-cloud-load-balancing"
[[ "$IMAGE" == *@sha256:* || "$IMAGE" =~ ^[a-z0-9-]+-docker\.pkg\.dev/ ]] ||
  usage_error "--image must be in Artifact Registry (REGION-docker.pkg.dev/...) or name a digest (IMAGE@sha256:...): a re-pushed tag would not be deployed"
[[ "$AUTH" =~ ^(oidc|cloud_run_iam)$ ]] || usage_error "--auth must be oidc or cloud_run_iam"
ADMIN_EMAIL='[^,@[:space:]]+@[^,@[:space:]]+'
[[ -z "$ADMIN_CALLERS" || "$ADMIN_CALLERS" =~ ^$ADMIN_EMAIL(,$ADMIN_EMAIL)*$ ]] ||
  usage_error "--admin-callers must be comma-separated email addresses, got '$ADMIN_CALLERS'"
check_names "$PROJECT_ID" "$FIRESTORE_DATABASE" "$FIRESTORE_COLLECTION"
check_store "$STORE"
[[ "$STORE" =~ $REDIS_STORE && -z "$NETWORK" ]] &&
  usage_error "--store redis://... needs --network: Cloud Run reaches Memorystore only through Direct VPC egress on the instance's authorized network"
[[ -n "$SUBNET" && -z "$NETWORK" ]] && usage_error "--subnet needs --network (Direct VPC egress)"
for name in "$NETWORK" "$SUBNET"; do
  [[ -z "$name" || "$name" =~ ^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$ || "$name" =~ ^projects/[^/[:space:]]+/(global|regions/[a-z0-9-]+)/(networks|subnetworks)/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$ ]] ||
    usage_error "--network and --subnet must be a name (e.g. default) or projects/P/global/networks/N | projects/P/regions/R/subnetworks/S, got '$name'"
done
"$PYTHON" "$DEPLOY_LIB/routes_iam.py" "$ROUTES_FILE" >/dev/null # validates the routes file

RUNTIME_EMAIL="$(sa_email "$RUNTIME_SA" "$PROJECT_ID")"
INVOKER_EMAIL="$(sa_email "$INVOKER_SA" "$PROJECT_ID")"
URL="$(service_url "$SERVICE" "$PROJECT_ID" "$REGION")"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
ENV_FILE="$WORK/env.yaml"
# Written by Python's JSON encoder (JSON is YAML): every value quoted and escaped, whatever it holds.
# The Firestore settings only with the Firestore store.
STORE_ENV=("RUNONCE_STORE=$STORE")
[[ "$STORE" == "firestore" ]] && STORE_ENV+=(
  "RUNONCE_FIRESTORE_PROJECT=$PROJECT_ID"
  "RUNONCE_FIRESTORE_DATABASE=$FIRESTORE_DATABASE"
  "RUNONCE_FIRESTORE_COLLECTION=$FIRESTORE_COLLECTION"
)
ADMIN_ENV=()
[[ -z "$ADMIN_CALLERS" ]] || ADMIN_ENV=("RUNONCE_ADMIN_CALLERS=$ADMIN_CALLERS")
"$PYTHON" - "$ENV_FILE" "$ROUTES_FILE" ${STORE_ENV[@]+"${STORE_ENV[@]}"} ${ADMIN_ENV[@]+"${ADMIN_ENV[@]}"} \
  "RUNONCE_AUTH=$AUTH" \
  "RUNONCE_AUDIENCE=$URL" \
  "RUNONCE_ALLOWED_CALLERS=$INVOKER_EMAIL" \
  "RUNONCE_LEASE_SECONDS=$LEASE_SECONDS" \
  "RUNONCE_DISPATCH_TIMEOUT_SECONDS=$DISPATCH_TIMEOUT_SECONDS" \
  "RUNONCE_RETENTION_SECONDS=$RETENTION_SECONDS" <<'PY'
import json, sys
path, routes_file, *pairs = sys.argv[1:]
env = dict(pair.split("=", 1) for pair in pairs)
with open(routes_file, encoding="utf-8") as handle:
    env["RUNONCE_ROUTES"] = handle.read()
with open(path, "w", encoding="utf-8") as handle:
    json.dump(env, handle, indent=1)
PY

# Deploy by digest: a tag can be re-pushed, and a fingerprint of the tag would then report "up to
# date" and deploy nothing. Artifact Registry resolves the tag; anything else must name a digest.
IMAGE_DIGEST="$IMAGE"
if [[ "$IMAGE" != *@sha256:* ]]; then
  IMAGE_DIGEST="$(gc artifacts docker images describe "$IMAGE" --format='value(image_summary.fully_qualified_digest)')"
  [[ "$IMAGE_DIGEST" == *@sha256:* ]] || usage_error "--image $IMAGE: Artifact Registry returned no digest"
  log "image $IMAGE is $IMAGE_DIGEST"
fi

DEPLOY_FLAGS=(
  --image="$IMAGE_DIGEST"
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
# Direct VPC egress: only private ranges through the network; Google APIs keep the default path.
[[ -n "$NETWORK" ]] && DEPLOY_FLAGS+=(--network="$NETWORK" --vpc-egress=private-ranges-only)
[[ -n "$SUBNET" ]] && DEPLOY_FLAGS+=(--subnet="$SUBNET")
# Label values allow [a-z0-9_-]{0,63}: the first 32 hex digits of the configuration's sha256.
FINGERPRINT="$({ printf '%s\n' "$SERVICE" ${DEPLOY_FLAGS[@]+"${DEPLOY_FLAGS[@]}"}; cat "$ENV_FILE"; } | sha256sum | cut -c1-32)"
DEPLOY_FLAGS+=(--env-vars-file="$ENV_FILE") # its temporary path stays out of the fingerprint

if [[ "$AUTH" == "cloud_run_iam" ]]; then
  # What runonce reads at start-up, and only that: granted before the deploy (the first revision runs
  # the check while it starts), on the project with a condition naming this one service.
  # One grant for the service of every region it runs in (docs/how-to/two-regions.md): the regions
  # already in the condition stay, this one is added.
  SELF_CHECK_ROLE="projects/$PROJECT_ID/roles/runonceServiceSelfCheck"
  ensure_custom_role "$SELF_CHECK_ROLE" "run.services.get,run.services.getIamPolicy"
  SELF_CHECK_CONDITION="$(gc projects get-iam-policy "$PROJECT_ID" --flatten='bindings[].members' \
    --format='value(bindings.role,bindings.members,bindings.condition.title,bindings.condition.expression)' |
    "$PYTHON" "$DEPLOY_LIB/own_service_condition.py" "$SELF_CHECK_ROLE" "serviceAccount:$RUNTIME_EMAIL" \
      "runonce-own-service-only" "$PROJECT_ID" "$SERVICE" "$REGION")"
  ensure_binding "$SELF_CHECK_ROLE" "serviceAccount:$RUNTIME_EMAIL" "runonce-own-service-only" \
    "$SELF_CHECK_CONDITION" projects -- "$PROJECT_ID"
fi

CURRENT="$(gc run services describe "$SERVICE" --region="$REGION" --project="$PROJECT_ID" \
  --format='value(metadata.labels.runonce-config)' 2>/dev/null || true)"
if [[ "$CURRENT" == "$FINGERPRINT" && "$FORCE" == false ]]; then
  log "= service $SERVICE is up to date (configuration $FINGERPRINT)"
else
  log "+ deploy service $SERVICE ($IMAGE_DIGEST) in $REGION"
  gc run deploy "$SERVICE" ${DEPLOY_FLAGS[@]+"${DEPLOY_FLAGS[@]}"} --update-labels="runonce-config=$FINGERPRINT" >&2
fi

ensure_binding roles/run.invoker "serviceAccount:$INVOKER_EMAIL" "" "" run services -- "$SERVICE" \
  --region="$REGION" --project="$PROJECT_ID"

log "done: $URL (callable by $INVOKER_EMAIL only)"
printf '%s\n' "$URL"
