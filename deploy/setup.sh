#!/usr/bin/env bash
# runonce's project-side setup: service accounts, the claim store (Firestore with its TTL policy, or
# roles/spanner.databaseUser on a Spanner database), and the runtime account's least-privilege grants for the routes' targets. Idempotent: every step
# reads first and changes only what is missing, so a second run changes nothing.
case "${BASH_VERSION:-}" in "" | [12].* | 3.[01].*) echo "$0: needs bash 3.2 or later (macOS's /bin/bash is 3.2), not ${BASH_VERSION:-sh}" >&2; exit 1 ;; esac
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") --project PROJECT_ID --region REGION --routes-file FILE [options]

Creates (if absent) runonce's runtime and invoker service accounts and its Firestore database with a
TTL policy on the run records' expire_at (with --store spanner://...: grants roles/spanner.databaseUser
on that database instead; with --store redis://...: nothing, Memorystore has no IAM for data), then grants the runtime account what its routes' targets
need (the IAM table, docs/how-to/iam.md), with custom roles in the targets' projects where no predefined role is
narrow enough (creating them needs iam.roles.create there, e.g. roles/iam.roleAdmin). The invoker's roles/run.invoker on the service is granted by
deploy-service.sh, once the service exists.

Options (each also read from the environment variable in brackets):
  --project ID                   project hosting runonce                            [PROJECT_ID]
  --region REGION                Cloud Run region; default Firestore location       [REGION]
  --routes-file FILE             routes file (YAML or JSON) the service will serve   [ROUTES_FILE]
  --runtime-sa ID|EMAIL          runtime service account (default: runonce)          [RUNTIME_SA]
  --invoker-sa ID|EMAIL          Scheduler's invoker account (default: runonce-invoker) [INVOKER_SA]
  --store URL                    claim store: firestore (default), spanner://projects/P/instances/I/databases/D[?table=T]
                                 (create its table with 'runonce store init') or redis[s]://HOST:PORT/DB  [STORE]
  --firestore-database NAME      default: (default)                                 [FIRESTORE_DATABASE]
  --firestore-location LOCATION  for a new database; default: the region            [FIRESTORE_LOCATION]
  --firestore-collection NAME    run records' collection (default: runonce_runs)     [FIRESTORE_COLLECTION]
  --cloud-build-role custom|predefined  for cloud_build_trigger routes: the custom role runonceBuildRunner
                                 (cloudbuild.builds.create/get/list; default) or roles/cloudbuild.builds.editor
                                 (also edits and cancels builds)  [CLOUD_BUILD_ROLE]
  --trigger-service-account EMAIL  a cloud_build_trigger's own account: runonce gets actAs on it
                                 (repeatable)                     [TRIGGER_SERVICE_ACCOUNTS, comma-separated]
  --downstream-service projects/P/locations/L/services/S  a Cloud Run service an http route with an
                                 audience calls: runonce gets roles/run.invoker on it
                                 (repeatable)                     [DOWNSTREAM_SERVICES, comma-separated]
  -h, --help                     this help
USAGE
}

PROJECT_ID="${PROJECT_ID:-}"
REGION="${REGION:-}"
ROUTES_FILE="${ROUTES_FILE:-}"
RUNTIME_SA="${RUNTIME_SA:-runonce}"
INVOKER_SA="${INVOKER_SA:-runonce-invoker}"
STORE="${STORE:-firestore}"
FIRESTORE_DATABASE="${FIRESTORE_DATABASE:-(default)}"
FIRESTORE_LOCATION="${FIRESTORE_LOCATION:-}"
FIRESTORE_COLLECTION="${FIRESTORE_COLLECTION:-runonce_runs}"
CLOUD_BUILD_ROLE="${CLOUD_BUILD_ROLE:-custom}"
IFS=',' read -r -a TRIGGER_SAS <<<"${TRIGGER_SERVICE_ACCOUNTS:-}"
IFS=',' read -r -a DOWNSTREAM <<<"${DOWNSTREAM_SERVICES:-}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project) PROJECT_ID="$(flag_value "$@")"; shift 2 ;;
    --region) REGION="$(flag_value "$@")"; shift 2 ;;
    --routes-file) ROUTES_FILE="$(flag_value "$@")"; shift 2 ;;
    --runtime-sa) RUNTIME_SA="$(flag_value "$@")"; shift 2 ;;
    --invoker-sa) INVOKER_SA="$(flag_value "$@")"; shift 2 ;;
    --store) STORE="$(flag_value "$@")"; shift 2 ;;
    --firestore-database) FIRESTORE_DATABASE="$(flag_value "$@")"; shift 2 ;;
    --firestore-location) FIRESTORE_LOCATION="$(flag_value "$@")"; shift 2 ;;
    --firestore-collection) FIRESTORE_COLLECTION="$(flag_value "$@")"; shift 2 ;;
    --cloud-build-role) CLOUD_BUILD_ROLE="$(flag_value "$@")"; shift 2 ;;
    --trigger-service-account) TRIGGER_SAS+=("$(flag_value "$@")"); shift 2 ;;
    --downstream-service) DOWNSTREAM+=("$(flag_value "$@")"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

require "$PROJECT_ID" "--project (or PROJECT_ID)"
require "$REGION" "--region (or REGION)"
require "$ROUTES_FILE" "--routes-file (or ROUTES_FILE)"
[[ -r "$ROUTES_FILE" ]] || usage_error "routes file '$ROUTES_FILE' cannot be read"
FIRESTORE_LOCATION="${FIRESTORE_LOCATION:-$REGION}"
[[ "$CLOUD_BUILD_ROLE" =~ ^(custom|predefined)$ ]] || usage_error "--cloud-build-role must be custom or predefined"
check_names "$PROJECT_ID" "$FIRESTORE_DATABASE" "$FIRESTORE_COLLECTION"
check_store "$STORE"
for service in ${DOWNSTREAM[@]+"${DOWNSTREAM[@]}"}; do
  [[ -z "$service" || "$service" =~ ^projects/[^/]+/locations/[^/]+/services/[^/]+$ ]] ||
    usage_error "--downstream-service must look like projects/P/locations/L/services/S, got '$service'"
done
# Every grant is computed (and the routes file validated) before anything is changed.
GRANTS_FLAGS=()
[[ "$CLOUD_BUILD_ROLE" == "predefined" ]] && GRANTS_FLAGS=(--predefined-cloud-build-role)
GRANTS="$("$PYTHON" "$DEPLOY_LIB/routes_iam.py" ${GRANTS_FLAGS[@]+"${GRANTS_FLAGS[@]}"} "$ROUTES_FILE")"

RUNTIME_EMAIL="$(sa_email "$RUNTIME_SA" "$PROJECT_ID")"
INVOKER_EMAIL="$(sa_email "$INVOKER_SA" "$PROJECT_ID")"
RUNTIME_MEMBER="serviceAccount:$RUNTIME_EMAIL"

ensure_service_account "$RUNTIME_EMAIL" "runonce runtime" \
  "Identity of the runonce Cloud Run service: claim store and the targets of its routes."
ensure_service_account "$INVOKER_EMAIL" "runonce invoker" \
  "Cloud Scheduler jobs sign their OIDC tokens as this account to call runonce."

# Firestore: the database, the TTL policy on expire_at, and roles/datastore.user on that database only.
ensure_firestore_store() {
  if gc firestore databases describe --database="$FIRESTORE_DATABASE" --project="$PROJECT_ID" \
    --format='value(name)' >/dev/null 2>&1; then
    log "= Firestore database $FIRESTORE_DATABASE exists"
  else
    log "+ Firestore database $FIRESTORE_DATABASE in $FIRESTORE_LOCATION (delete protection on)"
    gc firestore databases create --database="$FIRESTORE_DATABASE" --location="$FIRESTORE_LOCATION" \
      --type=firestore-native --delete-protection --project="$PROJECT_ID" --format='value(name)' >/dev/null
  fi

  TTL_FIELDS="$(gc firestore fields ttls list --database="$FIRESTORE_DATABASE" \
    --collection-group="$FIRESTORE_COLLECTION" --project="$PROJECT_ID" --format='value(name)')"
  if grep -q "/collectionGroups/$FIRESTORE_COLLECTION/fields/expire_at$" <<<"$TTL_FIELDS"; then
    log "= TTL policy on $FIRESTORE_COLLECTION.expire_at exists"
  else
    log "+ TTL policy on $FIRESTORE_COLLECTION.expire_at"
    gc firestore fields ttls update expire_at --collection-group="$FIRESTORE_COLLECTION" --enable-ttl \
      --database="$FIRESTORE_DATABASE" --project="$PROJECT_ID" --format='value(name)' >/dev/null
  fi

  # The claim store: only runonce's own database (IAM condition on the database's resource name).
  ensure_binding roles/datastore.user "$RUNTIME_MEMBER" "runonce-database-only" \
    "resource.name == \"projects/$PROJECT_ID/databases/$FIRESTORE_DATABASE\"" projects -- "$PROJECT_ID"
  STORE_DONE="Firestore $FIRESTORE_DATABASE/$FIRESTORE_COLLECTION"
}

# Spanner: read and write rows of that one database (its table comes from `runonce store init`).
ensure_spanner_store() {
  [[ "$STORE" =~ $SPANNER_STORE ]]
  local project="${BASH_REMATCH[1]}" instance="${BASH_REMATCH[2]}" database="${BASH_REMATCH[3]}"
  ensure_binding roles/spanner.databaseUser "$RUNTIME_MEMBER" "" "" spanner databases -- "$database" \
    --instance="$instance" --project="$project"
  log "  the run table: RUNONCE_STORE='$STORE' runonce store init (creates it with its row deletion policy, once)"
  STORE_DONE="Spanner projects/$project/instances/$instance/databases/$database"
}

case "$STORE" in
  firestore) ensure_firestore_store ;;
  spanner://*) ensure_spanner_store ;;
  *)
    log "= Redis store: no IAM grant (Memorystore data has none); deploy with deploy-service.sh --network for Direct VPC egress"
    STORE_DONE="Redis"
    ;;
esac

# actAs on a service account that runonce's requests name (a trigger's, a task's OIDC token's).
ensure_account_user() { # EMAIL
  local sa_project="${1#*@}"
  [[ "$sa_project" == *.iam.gserviceaccount.com ]] && sa_project="${sa_project%.iam.gserviceaccount.com}" || sa_project="$PROJECT_ID"
  ensure_binding roles/iam.serviceAccountUser "$RUNTIME_MEMBER" "" "" iam service-accounts -- "$1" \
    --project="$sa_project"
}

while IFS=$'\t' read -r role kind resource; do
  [[ -n "$role" ]] || continue
  case "$kind" in
    custom-role) ensure_custom_role "$role" "$resource" ;;
    project) ensure_binding "$role" "$RUNTIME_MEMBER" "" "" projects -- "$resource" ;;
    run-job)
      IFS=/ read -r _ job_project _ job_region _ job_name <<<"$resource"
      ensure_binding "$role" "$RUNTIME_MEMBER" "" "" run jobs -- "$job_name" \
        --region="$job_region" --project="$job_project"
      ;;
    tasks-queue)
      IFS=/ read -r _ queue_project _ queue_location _ queue_name <<<"$resource"
      ensure_binding "$role" "$RUNTIME_MEMBER" "" "" tasks queues -- "$queue_name" \
        --location="$queue_location" --project="$queue_project"
      ;;
    service-account) ensure_account_user "$resource" ;;
  esac
done <<<"$GRANTS"

for email in ${TRIGGER_SAS[@]+"${TRIGGER_SAS[@]}"}; do
  [[ -n "$email" ]] || continue
  ensure_account_user "$email"
done
for service in ${DOWNSTREAM[@]+"${DOWNSTREAM[@]}"}; do
  [[ -n "$service" ]] || continue
  IFS=/ read -r _ svc_project _ svc_region _ svc_name <<<"$service"
  ensure_binding roles/run.invoker "$RUNTIME_MEMBER" "" "" run services -- "$svc_name" \
    --region="$svc_region" --project="$svc_project"
done

log "done: runtime $RUNTIME_EMAIL, invoker $INVOKER_EMAIL, store $STORE_DONE"
