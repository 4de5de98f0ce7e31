variable "project_id" {
  description = "Project that hosts runonce: its Cloud Run service, service accounts, Firestore database and Scheduler jobs."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a project ID (6-30 lower-case letters, digits and hyphens, e.g. \"my-project\"), not a project number or name."
  }
}

variable "region" {
  description = "Region of the Cloud Run service, and of the Scheduler jobs unless scheduler_region is set (e.g. \"europe-west1\")."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a Google Cloud region such as \"us-central1\" or \"europe-west1\" (not a zone like \"us-central1-a\")."
  }
}

variable "additional_regions" {
  description = "More regions to run runonce in, besides region: one Cloud Run service in each, with the same settings, on the same store (which must then be multi-region: firestore_location \"nam5\" or \"eur3\", or a multi-region spanner_instance_config). A job lists the regions it fires in (jobs[*].regions); see docs/how-to/two-regions.md."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for region in var.additional_regions : can(regex("^[a-z]+-[a-z]+[0-9]+$", region))]) && length(distinct(var.additional_regions)) == length(var.additional_regions)
    error_message = "additional_regions must be distinct Google Cloud regions such as [\"us-east1\"] (not zones or multi-regions)."
  }
}

variable "scheduler_region" {
  description = "Region of the Scheduler jobs when it differs from region (Cloud Scheduler is not offered in every Cloud Run region). It also becomes the jobs' `location` in the run key."
  type        = string
  default     = null

  validation {
    condition     = var.scheduler_region == null ? true : can(regex("^[a-z]+-[a-z]+[0-9]+$", var.scheduler_region))
    error_message = "scheduler_region must be a Google Cloud region such as \"us-central1\"."
  }
}

variable "service_name" {
  description = "Name of the Cloud Run service."
  type        = string
  default     = "runonce"

  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]{0,47}[a-z0-9])?$", var.service_name))
    error_message = "service_name must be 1-49 lower-case letters, digits and hyphens, starting with a letter (e.g. \"runonce\")."
  }
}

variable "image" {
  description = "Container image built from this repository's Dockerfile, by digest (e.g. \"europe-west1-docker.pkg.dev/my-project/runonce/runonce@sha256:...\"): a tag can be re-pushed, and Terraform would see no change and deploy nothing."
  type        = string

  validation {
    condition     = can(regex("^[^\\s@]+@sha256:[0-9a-f]{64}$", var.image))
    error_message = "image must name a digest, e.g. \"europe-west1-docker.pkg.dev/my-project/runonce/runonce@sha256:<64 hex>\" (a re-pushed tag would not be deployed). Get it with: gcloud artifacts docker images describe IMAGE:TAG --format='value(image_summary.fully_qualified_digest)'."
  }
}

variable "routes" {
  description = <<-EOT
    runonce's routes, as the `routes:` mapping of a routes file (see docs/reference/routes.md): route name => { target = {...}, allowed_callers = [...], namespace = {...} }.
    Passed to the service as RUNONCE_ROUTES, and read here to grant runonce's runtime service account what each target needs.
    Load a YAML file with `yamldecode(file("routes.yaml")).routes`.
  EOT
  type        = any

  validation {
    condition     = length(keys(var.routes)) > 0 && alltrue([for name in keys(var.routes) : can(regex("^[a-z0-9][a-z0-9_-]{0,62}$", name))])
    error_message = "routes must name at least one route, and every route name must be 1-63 lower-case letters, digits, '-' or '_' (e.g. \"nightly-etl\")."
  }

  validation {
    condition     = alltrue([for route in values(var.routes) : contains(["log", "http", "workflows", "cloud_run_job", "cloud_build_trigger", "bigquery_job", "cloud_tasks_task", "batch_job", "dataflow_flex_template", "dataproc_batch", "vertex_pipeline_job", "google_api"], try(route.target.type, ""))])
    error_message = "Every route needs target.type, one of: log, http, workflows, cloud_run_job, cloud_build_trigger, bigquery_job, cloud_tasks_task, batch_job, dataflow_flex_template, dataproc_batch, vertex_pipeline_job, google_api."
  }

  validation {
    condition = alltrue([for route in values(var.routes) : (
      try(route.target.type, "") == "workflows" ? can(regex("^projects/[^/]+/locations/[^/]+/workflows/[^/]+$", route.target.workflow)) :
      try(route.target.type, "") == "cloud_run_job" ? can(regex("^projects/[^/]+/locations/[^/]+/jobs/[^/]+$", route.target.job)) :
      try(route.target.type, "") == "cloud_build_trigger" ? can(regex("^projects/[^/]+/locations/[^/]+/triggers/[^/]+$", route.target.trigger)) :
      try(route.target.type, "") == "bigquery_job" ? can(regex("^([a-z][a-z0-9.:-]*[a-z0-9]|[0-9]+)$", route.target.project)) :
      try(route.target.type, "") == "cloud_tasks_task" ? can(regex("^projects/[^/]+/locations/[^/]+/queues/[^/]+$", route.target.queue)) :
      try(route.target.type, "") == "batch_job" ? can(regex("^([a-z][a-z0-9.:-]*[a-z0-9]|[0-9]+)$", route.target.project)) :
      try(route.target.type, "") == "dataflow_flex_template" ? can(regex("^([a-z][a-z0-9.:-]*[a-z0-9]|[0-9]+)$", route.target.project)) :
      try(route.target.type, "") == "dataproc_batch" ? can(regex("^([a-z][a-z0-9.:-]*[a-z0-9]|[0-9]+)$", route.target.project)) :
      try(route.target.type, "") == "vertex_pipeline_job" ? can(regex("^([a-z][a-z0-9.:-]*[a-z0-9]|[0-9]+)$", route.target.project)) :
      try(route.target.type, "") == "http" ? can(regex("^https?://", route.target.url)) :
      true
    )])
    error_message = "A target's resource must be a full name: workflows needs workflow = \"projects/P/locations/L/workflows/W\", cloud_run_job needs job = \"projects/P/locations/L/jobs/J\", cloud_build_trigger needs trigger = \"projects/P/locations/L/triggers/T\", bigquery_job needs project = \"P\", cloud_tasks_task needs queue = \"projects/P/locations/L/queues/Q\", batch_job, dataflow_flex_template, dataproc_batch and vertex_pipeline_job need project = \"P\", http needs url = \"https://...\"."
  }
}

variable "jobs" {
  description = <<-EOT
    Cloud Scheduler jobs, by job ID. Each POSTs to /v1/routes/{route}:run?project={project_id}&location={scheduler region}
    with an OIDC token of the invoker service account. schedule is unix-cron, time_zone a tz database name, body an optional
    JSON object (as a string, e.g. jsonencode({mode = "full"})) handed to the target. Durations are in seconds.
    The defaults satisfy the retry rule (docs/concepts/retry-rule.md): retries must outlast the lease.
    regions (default: the Scheduler region alone) puts the same job, same ID and schedule, in each region listed, each
    calling runonce in its own region (the Scheduler region or one of additional_regions) with the location of the FIRST
    region in its URL: every region's delivery of a fire time is then one run (docs/how-to/two-regions.md).
  EOT
  type = map(object({
    route                    = string
    schedule                 = string
    regions                  = optional(list(string))
    time_zone                = optional(string, "Etc/UTC")
    description              = optional(string)
    body                     = optional(string)
    paused                   = optional(bool, false)
    attempt_deadline_seconds = optional(number, 60)
    retry = optional(object({
      retry_count                = optional(number, 5)
      min_backoff_seconds        = optional(number, 20)
      max_backoff_seconds        = optional(number, 300)
      max_doublings              = optional(number, 4)
      max_retry_duration_seconds = optional(number, 0)
    }), {})
  }))
  default = {}

  validation {
    condition     = alltrue([for name in keys(var.jobs) : can(regex("^[a-zA-Z0-9_-]{1,500}$", name))])
    error_message = "Scheduler job IDs may contain only letters, digits, '-' and '_' (e.g. \"nightly-etl\")."
  }

  validation {
    condition = alltrue([for job in values(var.jobs) : job.regions == null ? true : (
      length(job.regions) > 0 && length(distinct(job.regions)) == length(job.regions) &&
      alltrue([for region in job.regions : can(regex("^[a-z]+-[a-z]+[0-9]+$", region))])
    )])
    error_message = "jobs[*].regions must be a non-empty list of distinct Google Cloud regions, e.g. [\"us-central1\", \"us-east1\"]; the first one's location keys the runs."
  }

  validation {
    condition     = alltrue([for job in values(var.jobs) : can(regex("^[a-z0-9][a-z0-9_-]{0,62}$", job.route))])
    error_message = "jobs[*].route must be a route name: 1-63 lower-case letters, digits, '-' or '_'."
  }

  validation {
    condition     = alltrue([for job in values(var.jobs) : can(regex("^\\S+(\\s+\\S+){4}$", trimspace(job.schedule)))])
    error_message = "jobs[*].schedule must be a non-empty unix-cron expression with 5 fields, e.g. \"0 3 * * *\"."
  }

  validation {
    condition     = alltrue([for job in values(var.jobs) : can(regex("^(UTC|[A-Za-z]+(/[A-Za-z0-9_+-]+)+)$", job.time_zone))])
    error_message = "jobs[*].time_zone must be a tz database name such as \"Etc/UTC\" or \"Europe/Paris\"."
  }

  validation {
    condition     = alltrue([for job in values(var.jobs) : job.body == null ? true : can(keys(jsondecode(job.body)))])
    error_message = "jobs[*].body must be a JSON object, e.g. jsonencode({mode = \"full\"})."
  }

  validation {
    condition     = alltrue([for job in values(var.jobs) : job.attempt_deadline_seconds >= 15 && job.attempt_deadline_seconds <= 1800])
    error_message = "jobs[*].attempt_deadline_seconds must be between 15 and 1800 (Cloud Scheduler's limits for HTTP targets)."
  }

  validation {
    condition = alltrue([for job in values(var.jobs) : (
      job.retry.retry_count >= 0 && job.retry.retry_count <= 5 &&
      job.retry.min_backoff_seconds >= 0 && job.retry.min_backoff_seconds <= job.retry.max_backoff_seconds &&
      job.retry.max_backoff_seconds <= 3600 &&
      job.retry.max_doublings >= 0 && job.retry.max_doublings <= 16 &&
      job.retry.max_retry_duration_seconds >= 0
    )])
    error_message = "jobs[*].retry: retry_count 0-5, 0 <= min_backoff_seconds <= max_backoff_seconds <= 3600, max_doublings 0-16, max_retry_duration_seconds >= 0 (0 = no limit)."
  }
}

variable "runtime_service_account_id" {
  description = "Account ID of the service account runonce runs as."
  type        = string
  default     = "runonce"

  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]{4,28}[a-z0-9])$", var.runtime_service_account_id))
    error_message = "Service account IDs are 6-30 lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "invoker_service_account_id" {
  description = "Account ID of the service account whose OIDC token the Scheduler jobs send."
  type        = string
  default     = "runonce-invoker"

  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]{4,28}[a-z0-9])$", var.invoker_service_account_id))
    error_message = "Service account IDs are 6-30 lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "auditor_service_account_id" {
  description = "Account ID of the service account the audit's Scheduler job calls as (an admin caller)."
  type        = string
  default     = "runonce-auditor"

  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]{4,28}[a-z0-9])$", var.auditor_service_account_id))
    error_message = "Service account IDs are 6-30 lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "admin_callers" {
  description = "Emails allowed on runonce's admin API (GET /v1/runs, POST /v1/audit:run, POST /v1/routes/{route}:backfill), besides the auditor account (RUNONCE_ADMIN_CALLERS)."
  type        = list(string)
  default     = []
}

variable "auditor_token_creators" {
  description = "IAM members (user:you@example.com, group:ops@example.com) granted roles/iam.serviceAccountOpenIdTokenCreator on the auditor account: they may read runs through the admin API as it (deploy/smoke.sh --reader-sa, the auditor_service_account_email output). Needs audit.enabled."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for member in var.auditor_token_creators : can(regex("^(user|group|serviceAccount|domain):[^,:\\s]+$", member))])
    error_message = "auditor_token_creators holds IAM members: user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN."
  }
}

variable "audit" {
  description = <<-EOT
    The missed-runs audit (docs/how-to/audit-catch-up.md): a Scheduler job job_name calling
    POST /v1/audit:run every 10 minutes as the auditor account, a log-based metric runonce/missed_runs and an alert
    policy on it that notifies notification_channels (projects/P/notificationChannels/ID). enabled = false creates none.
  EOT
  type = object({
    enabled               = optional(bool, true)
    job_name              = optional(string, "runonce-audit")
    notification_channels = optional(list(string), [])
  })
  default = {}

  validation {
    condition     = can(regex("^[a-zA-Z0-9_-]{1,500}$", var.audit.job_name))
    error_message = "audit.job_name is a Scheduler job ID: letters, digits, '-' and '_' (e.g. \"runonce-audit\")."
  }
}

variable "store" {
  description = "Claim store (RUNONCE_STORE): \"firestore\" (a Firestore database and TTL policy), \"spanner\" (a Cloud Spanner database whose table has a row deletion policy) or \"redis\" (a Memorystore for Redis instance, reached over Direct VPC egress on network)."
  type        = string
  default     = "firestore"

  validation {
    condition     = contains(["firestore", "spanner", "redis"], var.store)
    error_message = "store must be one of: firestore, spanner, redis."
  }
}

variable "network" {
  description = "VPC network of the service's Direct VPC egress (e.g. \"default\" or \"projects/P/global/networks/N\"), and the network a created Memorystore instance is authorized on. Required when store = \"redis\"; null for no VPC egress."
  type        = string
  default     = null
}

variable "subnetwork" {
  description = "Subnetwork of network in region the service's Direct VPC egress takes its addresses from; null lets Cloud Run pick the network's subnet of the same name as the region's."
  type        = string
  default     = null
}

variable "create_spanner_instance" {
  description = "store = \"spanner\": create the Spanner instance spanner_instance. Set to false to use one that already exists."
  type        = bool
  default     = true
}

variable "spanner_instance" {
  description = "store = \"spanner\": Spanner instance (ID) holding the database."
  type        = string
  default     = "runonce"

  validation {
    condition     = can(regex("^[a-z][-a-z0-9]{0,62}[a-z0-9]$", var.spanner_instance))
    error_message = "spanner_instance must be 2-64 lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "spanner_instance_config" {
  description = "store = \"spanner\": configuration of a created instance (e.g. \"regional-europe-west1\", \"eur3\"); defaults to regional-<region>."
  type        = string
  default     = null
}

variable "spanner_processing_units" {
  description = "store = \"spanner\": compute capacity of a created instance, in processing units (100 = 1/10 node)."
  type        = number
  default     = 100
}

variable "create_spanner_database" {
  description = "store = \"spanner\": create the database spanner_database, with the run table and its row deletion policy. Set to false to use one that already exists (create its table with `runonce store init`)."
  type        = bool
  default     = true
}

variable "spanner_database" {
  description = "store = \"spanner\": Spanner database holding the run table."
  type        = string
  default     = "runonce"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_-]{0,28}[a-z0-9]$", var.spanner_database))
    error_message = "spanner_database must be 2-30 lower-case letters, digits, '_' and '-', starting with a letter."
  }
}

variable "spanner_table" {
  description = "store = \"spanner\": table of run records (the URL's ?table=)."
  type        = string
  default     = "runonce_runs"

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9_]{0,127}$", var.spanner_table))
    error_message = "spanner_table must be 1-128 letters, digits and '_', starting with a letter."
  }
}

variable "spanner_steps_table" {
  description = "store = \"spanner\": runonce-guard's table of job steps in the same database (RUNONCE_STORE=spanner://…?table= of the jobs that guard their steps)."
  type        = string
  default     = "runonce_steps"

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9_]{0,127}$", var.spanner_steps_table))
    error_message = "spanner_steps_table must be 1-128 letters, digits and '_', starting with a letter."
  }
}

variable "create_redis_instance" {
  description = "store = \"redis\": create a Memorystore for Redis instance. Set to false to use redis_url instead."
  type        = bool
  default     = true
}

variable "redis_url" {
  description = "store = \"redis\" with create_redis_instance = false: the RUNONCE_STORE URL of an existing Redis (redis://HOST:PORT/DB or rediss://...?ca_file=PATH), reachable from network."
  type        = string
  default     = null
}

variable "redis_tier" {
  description = "store = \"redis\": tier of a created instance: STANDARD_HA (a replica, automatic failover) or BASIC (one node: a restart loses the run records)."
  type        = string
  default     = "STANDARD_HA"

  validation {
    condition     = contains(["STANDARD_HA", "BASIC"], var.redis_tier)
    error_message = "redis_tier must be STANDARD_HA or BASIC."
  }
}

variable "redis_memory_size_gb" {
  description = "store = \"redis\": memory of a created instance, in GiB."
  type        = number
  default     = 1
}

variable "redis_transit_encryption_mode" {
  description = "store = \"redis\": SERVER_AUTHENTICATION (TLS; the service gets the instance's CA through Secret Manager, mounted as a file) or DISABLED."
  type        = string
  default     = "SERVER_AUTHENTICATION"

  validation {
    condition     = contains(["SERVER_AUTHENTICATION", "DISABLED"], var.redis_transit_encryption_mode)
    error_message = "redis_transit_encryption_mode must be SERVER_AUTHENTICATION or DISABLED."
  }
}

variable "create_firestore_database" {
  description = "Create the Firestore database. Set to false to use one that already exists (its name in firestore_database)."
  type        = bool
  default     = true
}

variable "firestore_database" {
  description = "Firestore database holding the run records (RUNONCE_FIRESTORE_DATABASE)."
  type        = string
  default     = "(default)"

  validation {
    condition     = var.firestore_database == "(default)" || can(regex("^[a-z][a-z0-9-]{2,61}[a-z0-9]$", var.firestore_database))
    error_message = "firestore_database must be \"(default)\" or 4-63 lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "firestore_location" {
  description = "Location of a created Firestore database (a region like \"europe-west1\" or a multi-region like \"eur3\"); defaults to region."
  type        = string
  default     = null
}

variable "firestore_collection" {
  description = "Collection of run records (RUNONCE_FIRESTORE_COLLECTION); its `expire_at` field gets the TTL policy."
  type        = string
  default     = "runonce_runs"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,100}$", var.firestore_collection))
    error_message = "firestore_collection must be 1-100 letters, digits, '-' or '_'."
  }
}

variable "lease_seconds" {
  description = "How long a claim holds a run before another attempt may take over (RUNONCE_LEASE_SECONDS)."
  type        = number
  default     = 300

  validation {
    condition     = var.lease_seconds >= 10
    error_message = "lease_seconds must be at least 10."
  }
}

variable "dispatch_timeout_seconds" {
  description = "Longest wait for a target's answer (RUNONCE_DISPATCH_TIMEOUT_SECONDS); must be below lease_seconds."
  type        = number
  default     = 30

  validation {
    condition     = var.dispatch_timeout_seconds > 0
    error_message = "dispatch_timeout_seconds must be positive."
  }
}

variable "retention_seconds" {
  description = "How long run records are kept (RUNONCE_RETENTION_SECONDS); Firestore's TTL deletes them after that."
  type        = number
  default     = 86400

  validation {
    condition     = var.retention_seconds >= 3600
    error_message = "retention_seconds must be at least 3600: records must outlive every retry of a run."
  }
}

variable "request_timeout_seconds" {
  description = "Cloud Run request timeout; must cover every job's attempt deadline."
  type        = number
  default     = 120

  validation {
    condition     = var.request_timeout_seconds >= 15 && var.request_timeout_seconds <= 3600
    error_message = "request_timeout_seconds must be between 15 and 3600."
  }
}

variable "min_instances" {
  description = "Minimum Cloud Run instances (1 removes cold starts at a standing cost)."
  type        = number
  default     = 0

  validation {
    condition     = var.min_instances >= 0
    error_message = "min_instances must be 0 or more."
  }
}

variable "max_instances" {
  description = "Maximum Cloud Run instances."
  type        = number
  default     = 10

  validation {
    condition     = var.max_instances >= 1
    error_message = "max_instances must be at least 1."
  }
}

variable "ingress" {
  description = "Cloud Run ingress. INGRESS_TRAFFIC_INTERNAL_ONLY (default) admits Cloud Scheduler and Cloud Tasks of the service's own project (or VPC Service Controls perimeter), which count as internal sources; set INGRESS_TRAFFIC_ALL when jobs in other projects call runonce (IAM still requires the invoker's token)."
  type        = string
  default     = "INGRESS_TRAFFIC_INTERNAL_ONLY"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.ingress)
    error_message = "ingress must be INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
}

variable "cpu" {
  description = "CPU limit of the container."
  type        = string
  default     = "1"
}

variable "memory" {
  description = "Memory limit of the container."
  type        = string
  default     = "512Mi"
}

variable "env" {
  description = "Extra environment variables for the container (e.g. RUNONCE_LOG_FORMAT). The RUNONCE_ variables this module sets cannot be overridden here."
  type        = map(string)
  default     = {}
}

variable "cloud_build_role" {
  description = "Role for cloud_build_trigger routes, in the trigger's project: \"custom\" (default) creates runonceBuildRunner with cloudbuild.builds.create/get/list; \"predefined\" grants roles/cloudbuild.builds.editor, which can also edit and cancel any build. Either way, running a trigger that acts as another service account is code execution as that account: keep such triggers in a project of their own."
  type        = string
  default     = "custom"

  validation {
    condition     = contains(["custom", "predefined"], var.cloud_build_role)
    error_message = "cloud_build_role must be \"custom\" or \"predefined\"."
  }
}

variable "auth" {
  description = "RUNONCE_AUTH: \"oidc\" (default) verifies each caller's Google-signed ID token; \"cloud_run_iam\" trusts Cloud Run's invoker check (for when the signature does not reach the container) and gives the runtime account run.services.get and .getIamPolicy on the service, which runonce checks at start-up."
  type        = string
  default     = "oidc"

  validation {
    condition     = contains(["oidc", "cloud_run_iam"], var.auth)
    error_message = "auth must be \"oidc\" or \"cloud_run_iam\"."
  }
}

variable "trigger_service_accounts" {
  description = "Emails of the service accounts that cloud_build_trigger routes' triggers run as: runonce's runtime account gets roles/iam.serviceAccountUser on each (Cloud Build requires actAs)."
  type        = list(string)
  default     = []
}

variable "downstream_services" {
  description = "Cloud Run services that http routes with an `audience` call, as \"projects/P/locations/L/services/S\": runonce's runtime account gets roles/run.invoker on each."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for s in var.downstream_services : can(regex("^projects/[^/]+/locations/[^/]+/services/[^/]+$", s))])
    error_message = "downstream_services entries must look like \"projects/P/locations/L/services/S\"."
  }
}

variable "enable_apis" {
  description = "Enable the APIs runonce needs (Cloud Run, Cloud Scheduler, IAM, and the store's: Firestore, Spanner, or Memorystore and Secret Manager). They are never disabled on destroy."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Protect the Cloud Run service against `terraform destroy`."
  type        = bool
  default     = true
}

variable "labels" {
  description = "Labels for the Cloud Run service."
  type        = map(string)
  default     = {}
}

variable "log_based_metric_outcomes" {
  description = "Delivery outcomes to count with log-based metrics (runonce/deliveries_<outcome>); [] for none."
  type        = list(string)
  default     = ["duplicate", "failed", "unknown"]

  # Every outcome the delivery line can carry: the statuses (docs/reference/statuses.md, from
  # runonce/api/answers.py) and internal_error (a 500, a bug). tests/test_operating_logs.py holds
  # this list to the code.
  validation {
    condition = alltrue([
      for outcome in var.log_based_metric_outcomes : contains(
        ["processed", "duplicate", "skipped", "invalid", "unauthenticated", "forbidden", "not_found",
          "in_progress", "forced_run_refused", "waiting", "payload_mismatch", "throttled", "failed",
        "unavailable", "unknown", "internal_error"], outcome
      )
    ])
    error_message = "log_based_metric_outcomes must name outcomes runonce writes: processed, duplicate, skipped, invalid, unauthenticated, forbidden, not_found, in_progress, forced_run_refused, waiting, payload_mismatch, throttled, failed, unavailable, unknown, internal_error."
  }
}

variable "dashboard" {
  description = "Create the Cloud Monitoring dashboard \"runonce\" (dashboard.json; docs/operating.md describes each tile)."
  type        = bool
  default     = true
}

variable "alerts" {
  description = <<-EOT
    Alert policies (docs/operating.md, each with its runbook), on or off one by one; all on by default.
    missed_runs and runs_unresolved count the audit's log lines, so they need audit.enabled.
  EOT
  type = object({
    missed_runs                = optional(bool, true)
    no_progress                = optional(bool, true)
    runs_unresolved            = optional(bool, true)
    target_failures            = optional(bool, true)
    store_unavailable          = optional(bool, true)
    service_errors             = optional(bool, true)
    scheduler_attempts_failing = optional(bool, true)
  })
  default = {}
}

variable "notification_channels" {
  description = "Where every alert policy notifies: projects/P/notificationChannels/ID (audit.notification_channels is added to it)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for channel in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", channel))])
    error_message = "notification_channels are full names: projects/P/notificationChannels/ID."
  }
}

variable "no_progress_factor" {
  description = "The no-progress alert fires when a scheduled job's route records no processed or skipped run for this many times the longest gap between its fire times."
  type        = number
  default     = 2

  validation {
    condition     = var.no_progress_factor >= 1.5
    error_message = "no_progress_factor must be at least 1.5: below it, one fire time retried a little late pages."
  }
}

variable "target_failure_threshold" {
  description = "The target-failures alert fires when one route has more than this many failed answers in an hour that no retry of the same run completed."
  type        = number
  default     = 0
}
