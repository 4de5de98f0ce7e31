# shellcheck shell=bash
# Shared by the deploy/ scripts (sourced): messages, flag values, and idempotent IAM grants.
# Every gcloud call goes through `gc`, so GCLOUD can name another binary and every call is --quiet.

GCLOUD="${GCLOUD:-gcloud}"
# shellcheck disable=SC2034 # DEPLOY_LIB, PYTHON and RUNONCE_PKG are used by the scripts that source this file
DEPLOY_LIB="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
RUNONCE_PKG="$(cd "$DEPLOY_LIB/../../runonce" && pwd)"

log() { printf 'runonce-deploy: %s\n' "$*" >&2; }

# Bad usage: say what is wrong and exit 2 before anything is changed.
usage_error() {
  printf 'error: %s\n(see %s --help)\n' "$1" "$(basename "$0")" >&2
  exit 2
}

gc() { "$GCLOUD" --quiet "$@"; }

# flag_value NAME VALUE: the value following a flag, which must be present.
flag_value() {
  [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || usage_error "$1 needs a value"
  printf '%s' "$2"
}

require() { # require VALUE "--flag (or ENV)"
  [[ -n "$1" ]] || usage_error "missing $2"
}

require_int() { # require_int VALUE NAME
  [[ "$1" =~ ^[0-9]+$ ]] || usage_error "$2 must be a whole number of seconds or a count, got '$1'"
}

# check_names PROJECT_ID FIRESTORE_DATABASE FIRESTORE_COLLECTION: the forms Google accepts, checked
# before they reach a file, an IAM condition or a command line.
check_names() {
  [[ "$1" =~ ^[a-z][a-z0-9-]{4,28}[a-z0-9]$ ]] ||
    usage_error "--project must be a project ID (6-30 lower-case letters, digits and hyphens, e.g. my-project), got '$1'"
  [[ "$2" == "(default)" || "$2" =~ ^[a-z][a-z0-9-]{2,61}[a-z0-9]$ ]] ||
    usage_error "--firestore-database must be (default) or 4-63 lower-case letters, digits and hyphens, starting with a letter, got '$2'"
  [[ "$3" =~ ^[A-Za-z0-9_-]{1,100}$ ]] ||
    usage_error "--firestore-collection must be 1-100 letters, digits, '-' or '_', got '$3'"
}

# check_store URL: RUNONCE_STORE in a form runonce opens (runonce/stores): firestore, a Spanner database,
# or a Redis URL; checked before it reaches the env file or an IAM grant.
SPANNER_STORE='^spanner://projects/([a-z][a-z0-9-]{4,28}[a-z0-9])/instances/([a-z][-a-z0-9]{0,62}[a-z0-9])/databases/([a-z][a-z0-9_-]{0,28}[a-z0-9])([?]table=[A-Za-z][A-Za-z0-9_]{0,127})?$'
REDIS_STORE='^rediss?://[^/?#[:space:]]+(/[0-9]+)?([?][^[:space:]]*)?$'
check_store() {
  [[ "$1" == "firestore" || "$1" =~ $SPANNER_STORE || "$1" =~ $REDIS_STORE ]] ||
    usage_error "--store must be firestore, spanner://projects/P/instances/I/databases/D[?table=T] or redis://[:PASSWORD@]HOST[:PORT][/DB] (rediss://...?ca_file=PATH for TLS), got '$1'"
}

sa_email() { # sa_email ACCOUNT_ID_OR_EMAIL PROJECT
  if [[ "$1" == *@* ]]; then printf '%s' "$1"; else printf '%s@%s.iam.gserviceaccount.com' "$1" "$2"; fi
}

project_number() {
  gc projects describe "$1" --format='value(projectNumber)'
}

# The deterministic run.app URL (https://SERVICE-PROJECT_NUMBER.REGION.run.app): known before the
# service exists, so it serves as the Scheduler target and the OIDC audience runonce checks.
service_url() { # service_url SERVICE PROJECT REGION
  printf 'https://%s-%s.%s.run.app' "$1" "$(project_number "$2")" "$3"
}

# ensure_binding ROLE MEMBER CONDITION_TITLE CONDITION_EXPRESSION GROUP... -- RESOURCE_ARGS...
# Adds ROLE for MEMBER on a resource unless the policy already has exactly that binding (same
# condition title AND expression, or no condition): reads the policy first, so a second run writes
# nothing. A binding with the same title but another expression is stale (e.g. after
# --firestore-database changed): it is removed, so the grant follows the new expression.
#   ensure_binding roles/run.invoker serviceAccount:x@p.iam.gserviceaccount.com "" "" \
#     run services -- runonce --region=europe-west1 --project=p
# Arrays that may be empty expand as ${a[@]+"${a[@]}"}: bash 3.2 (macOS) treats "${a[@]}" of an
# empty array as unbound under `set -u`.
ensure_binding() {
  local role="$1" member="$2" title="$3" expression="$4"
  shift 4
  local group=()
  while [[ "$1" != "--" ]]; do group+=("$1"); shift; done
  shift
  local existing stale
  existing="$(gc ${group[@]+"${group[@]}"} get-iam-policy "$@" --flatten='bindings[].members' \
    --format='value(bindings.role,bindings.members,bindings.condition.title,bindings.condition.expression)')"
  if awk -F'\t' -v role="$role" -v member="$member" -v title="$title" -v expression="$expression" \
    '$1 == role && $2 == member && $3 == title && $4 == expression { found = 1 } END { exit !found }' <<<"$existing"; then
    log "= ${group[*]-} $1: $member already has $role"
    return 0
  fi
  local condition=()
  if [[ -n "$expression" ]]; then
    condition=("--condition=expression=${expression},title=${title}")
    stale="$(awk -F'\t' -v role="$role" -v member="$member" -v title="$title" \
      '$1 == role && $2 == member && $3 == title { print $4 }' <<<"$existing")"
    while IFS= read -r old; do
      [[ -n "$old" ]] || continue
      log "- ${group[*]-} $1: remove $role for $member on the stale condition '$title' ($old)"
      gc ${group[@]+"${group[@]}"} remove-iam-policy-binding "$@" --member="$member" --role="$role" \
        "--condition=expression=${old},title=${title}" --format='value(etag)' >/dev/null
    done <<<"$stale"
  elif [[ "${group[*]-}" == "projects" ]]; then
    condition=("--condition=None")
  fi
  log "+ ${group[*]-} $1: grant $role to $member"
  gc ${group[@]+"${group[@]}"} add-iam-policy-binding "$@" --member="$member" --role="$role" ${condition[@]+"${condition[@]}"} \
    --format='value(etag)' >/dev/null
}

# ensure_service_account EMAIL DISPLAY_NAME DESCRIPTION: an account of $PROJECT_ID, created if missing.
ensure_service_account() { # EMAIL DISPLAY_NAME DESCRIPTION
  if gc iam service-accounts describe "$1" --project="$PROJECT_ID" --format='value(email)' >/dev/null 2>&1; then
    log "= service account $1 exists"
    return 0
  fi
  log "+ service account $1"
  gc iam service-accounts create "${1%%@*}" --project="$PROJECT_ID" --display-name="$2" --description="$3" \
    --format='value(email)' >/dev/null
}

# ensure_custom_role projects/P/roles/ID PERMISSION,PERMISSION...: a project-level custom role with
# exactly these permissions; created, or updated when they differ, else left alone.
ensure_custom_role() {
  local name="$1" permissions="$2" project role_id current
  project="$(cut -d/ -f2 <<<"$name")" role_id="${name##*/}"
  if current="$(gc iam roles describe "$role_id" --project="$project" --format='value(includedPermissions)' 2>/dev/null)"; then
    if [[ "$(tr ';' ',' <<<"$current" | tr ',' '\n' | sort | paste -sd, -)" == "$(tr ',' '\n' <<<"$permissions" | sort | paste -sd, -)" ]]; then
      log "= custom role $name exists"
      return 0
    fi
    log "~ custom role $name: permissions $permissions"
    gc iam roles update "$role_id" --project="$project" --permissions="$permissions" --format='value(name)' >/dev/null
    return 0
  fi
  log "+ custom role $name ($permissions)"
  gc iam roles create "$role_id" --project="$project" --title="runonce: ${role_id#runonce}" \
    --description="runonce's runtime account (see runonce's docs/how-to/iam.md)" \
    --permissions="$permissions" --stage=GA --format='value(name)' >/dev/null
}

# The service's start-up rule (runonce/settings.py): lease >= dispatch timeout + 2 x store timeout +
# margin, and retention > lease; with RUNONCE_STORE_TIMEOUT_SECONDS at its default. A test holds
# these two numbers to the code.
RUNONCE_STORE_TIMEOUT_DEFAULT=5
RUNONCE_LEASE_MARGIN=1
check_lease_rule() { # LEASE DISPATCH_TIMEOUT RETENTION
  local lease=$1 dispatch=$2 retention=$3 needed
  needed=$(( dispatch + 2 * RUNONCE_STORE_TIMEOUT_DEFAULT + RUNONCE_LEASE_MARGIN ))
  (( lease >= needed )) || usage_error "--lease-seconds ($lease) must be at least --dispatch-timeout-seconds ($dispatch) + 2 x the store timeout ($RUNONCE_STORE_TIMEOUT_DEFAULT) + $RUNONCE_LEASE_MARGIN = $needed: an attempt still dispatching or finishing after its lease could overlap the next one"
  (( retention > lease )) || usage_error "--retention-seconds ($retention) must exceed --lease-seconds ($lease): a record must outlive its lease"
}

# The retry rule (docs/concepts/retry-rule.md): Scheduler's attempts and retries against runonce's lease.
# The retry window comes from runonce/scheduler_retry.py, the one implementation that lint and
# Terraform's rules are held to. Prints "SHORTEST LONGEST" (seconds); exits 2 naming the broken rule.
check_retry_rule() { # ATTEMPT_DEADLINE RETRY_COUNT MIN_BACKOFF MAX_BACKOFF MAX_DOUBLINGS MAX_RETRY_DURATION LEASE DISPATCH_TIMEOUT RETENTION REQUEST_TIMEOUT
  local deadline=$1 count=$2 min=$3 max=$4 doublings=$5 max_duration=$6 lease=$7 dispatch=$8 retention=$9 request_timeout=${10}
  local store_margin=15 window retries shortest longest
  (( deadline >= 15 && deadline <= 1800 )) || usage_error "--attempt-deadline must be between 15 and 1800 seconds (Cloud Scheduler's limits), got $deadline"
  (( count <= 5 )) || usage_error "--retry-count must be 0-5 (Cloud Scheduler's limit), got $count"
  (( min <= max )) || usage_error "--min-backoff ($min) must not exceed --max-backoff ($max)"
  check_lease_rule "$lease" "$dispatch" "$retention"
  window="$("$PYTHON" "$RUNONCE_PKG/scheduler_retry.py" --attempt-deadline="$deadline" --retry-count="$count" \
    --min-backoff="$min" --max-backoff="$max" --max-doublings="$doublings" --max-retry-duration="$max_duration")" ||
    usage_error "cannot compute the retry window with $PYTHON"
  read -r retries shortest longest <<<"$window"
  (( deadline >= dispatch + store_margin )) || usage_error "--attempt-deadline ($deadline) must be at least the dispatch timeout + $store_margin = $(( dispatch + store_margin )) s, or Scheduler abandons attempts runonce is still completing"
  (( deadline <= request_timeout )) || usage_error "--attempt-deadline ($deadline) exceeds the service's request timeout ($request_timeout)"
  (( shortest >= lease + deadline )) || usage_error "retries span $shortest s, less than the lease + attempt deadline = $(( lease + deadline )) s: a run whose attempt died after claiming would never be taken over; raise --retry-count, --min-backoff or --max-backoff"
  (( retention > longest )) || usage_error "--retention-seconds ($retention) must exceed the longest retry window ($longest s: $retries retries, each attempt taking the whole deadline), or a late retry finds no record and runs again"
  printf '%s %s' "$shortest" "$longest"
}
