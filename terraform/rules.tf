/**
 * Values derived from the variables alone, and the rules that tie variables together.
 *
 * Nothing here calls Google: `terraform plan` stops on a broken rule before anything is created,
 * and the module's tests evaluate this file with variables.tf alone, offline.
 *
 * The retry rule. A delivery can die after claiming its run (instance crash, redeploy). Its claim
 * blocks the run until the lease ends; only a later retry of the same schedule time takes over and
 * reconciles with the target. So, for every Scheduler job:
 *   1. attempt deadline >= dispatch timeout + store margin: Scheduler waits for runonce's answer
 *      (one dispatch, plus claim and finish on the store) instead of abandoning a working attempt;
 *   2. attempt deadline <= the Cloud Run request timeout;
 *   3. shortest retry window >= lease + attempt deadline: retries are still coming after a dead
 *      attempt's lease has run out, so one of them completes the run;
 *   4. retention > longest retry window: the record outlives every retry, so a late retry is
 *      answered `duplicate` instead of running again.
 * The two windows are runonce/scheduler_retry.py's (the one implementation; a test holds this copy to
 * it): `shortest` = the last retry's start when every attempt is answered at once, `longest` = the
 * last attempt's end when every attempt takes the whole deadline.
 * And for the service: lease >= dispatch timeout + 2 x store timeout + margin (runonce/settings.py's rule).
 */

locals {
  scheduler_region   = coalesce(var.scheduler_region, var.region)
  firestore_location = coalesce(var.firestore_location, var.region)

  targets = [for route in values(var.routes) : route.target]

  # projects/P/locations/L/workflows/W -> P
  workflow_projects = toset([
    for t in local.targets : split("/", t.workflow)[1] if t.type == "workflows"
  ])

  # projects/P/locations/L/jobs/J -> {project, location, name}; two roles on each job: run with
  # overrides, and the custom execution reader (iam.tf) of the job's project.
  run_jobs = {
    for job in distinct([for t in local.targets : t.job if t.type == "cloud_run_job"]) : job => {
      project  = split("/", job)[1]
      location = split("/", job)[3]
      name     = split("/", job)[5]
    }
  }
  run_job_projects = toset([for job in values(local.run_jobs) : job.project])
  run_job_grants = merge([
    for name, job in local.run_jobs : {
      for role in ["roles/run.jobsExecutorWithOverrides", "projects/${job.project}/roles/runonceExecutionReader"] :
      "${name} ${role}" => { job = job, role = role }
    }
  ]...)

  # projects/P/locations/L/triggers/T -> P
  build_projects = toset([
    for t in local.targets : split("/", t.trigger)[1] if t.type == "cloud_build_trigger"
  ])

  # bigquery_job routes name their project: jobs run (and are billed) there.
  bigquery_projects = toset([
    for t in local.targets : t.project if t.type == "bigquery_job"
  ])

  # The batch workloads name their project: a role there per type (Dataproc's is the custom
  # runonceDataprocBatchRunner, iam.tf), and actAs on the service account the workload runs as.
  workload_roles = {
    batch_job              = "roles/batch.jobsEditor"
    dataflow_flex_template = "roles/dataflow.developer"
    vertex_pipeline_job    = "roles/aiplatform.user"
  }
  workload_project_grants = {
    for grant in distinct([
      for t in local.targets : { project = t.project, role = local.workload_roles[t.type] } if contains(keys(local.workload_roles), t.type)
    ]) : "${grant.project} ${grant.role}" => grant
  }
  dataproc_projects = toset([
    for t in local.targets : t.project if t.type == "dataproc_batch"
  ])
  workload_service_accounts = toset(compact([
    for t in local.targets : (
      t.type == "batch_job" ? try(t.job.allocationPolicy.serviceAccount.email, "") :
      t.type == "dataflow_flex_template" ? try(t.launch_parameter.environment.serviceAccountEmail, "") :
      t.type == "dataproc_batch" ? try(t.batch.environmentConfig.executionConfig.serviceAccount, "") :
      t.type == "vertex_pipeline_job" ? try(t.pipeline_job.serviceAccount, "") : ""
    )
  ]))

  # projects/P/locations/L/queues/Q -> {project, location, name}; two roles on each queue: create
  # tasks, and read them (tasks.get, to reconcile), which the enqueuer role cannot.
  tasks_queues = {
    for queue in distinct([for t in local.targets : t.queue if t.type == "cloud_tasks_task"]) : queue => {
      project  = split("/", queue)[1]
      location = split("/", queue)[3]
      name     = split("/", queue)[5]
    }
  }
  tasks_queue_grants = merge([
    for name, queue in local.tasks_queues : {
      for role in ["roles/cloudtasks.enqueuer", "roles/cloudtasks.viewer"] : "${name} ${role}" => { queue = queue, role = role }
    }
  ]...)
  # A task that carries an OIDC token names its service account: creating it needs actAs on it.
  task_token_accounts = toset(compact([
    for t in local.targets : try(t.http_request.oidc_token.service_account_email, "") if t.type == "cloud_tasks_task"
  ]))

  downstream_services = {
    for service in var.downstream_services : service => {
      project  = split("/", service)[1]
      location = split("/", service)[3]
      name     = split("/", service)[5]
    }
  }

  # Scheduler's backoff before retry i: min_backoff doubling max_doublings times, then growing
  # linearly by min_backoff * 2^max_doublings, capped at max_backoff. Retries go on until both
  # retry_count and max_retry_duration (0 = no time limit) are used up, so a retry i is sent when
  # i <= retry_count or it starts within max_retry_duration. At most retry_cap retries are followed.
  retry_cap = 64
  retry_backoffs = {
    for name, job in var.jobs : name => [
      for i in range(1, local.retry_cap + 1) : min(job.retry.max_backoff_seconds,
        i <= job.retry.max_doublings + 1 ? job.retry.min_backoff_seconds * pow(2, i - 1) :
      job.retry.min_backoff_seconds * pow(2, job.retry.max_doublings) * (i - job.retry.max_doublings))
    ]
  }
  # Start of retry i after the first attempt, with attempts answered at once / taking the deadline.
  retry_starts = {
    for name, job in var.jobs : name => {
      for bound, attempt in { shortest = 0, longest = job.attempt_deadline_seconds } : bound => [
        for i in range(1, local.retry_cap + 1) : i * attempt + sum(slice(local.retry_backoffs[name], 0, i))
        if i <= job.retry.retry_count || (job.retry.max_retry_duration_seconds > 0 &&
        i * attempt + sum(slice(local.retry_backoffs[name], 0, i)) <= job.retry.max_retry_duration_seconds)
      ]
    }
  }
  retry_window_seconds = {
    for name, starts in local.retry_starts : name => max(concat([0], starts.shortest)...)
  }
  retry_window_longest_seconds = {
    for name, starts in local.retry_starts : name => max(concat([0], starts.longest)...) + var.jobs[name].attempt_deadline_seconds
  }

  # Claim and finish each wait up to RUNONCE_STORE_TIMEOUT_SECONDS (5 s) on Firestore; three of
  # those is the margin an attempt needs on top of the dispatch timeout.
  store_margin_seconds = 15

  # The service's own start-up rule (runonce/settings.py: lease >= dispatch timeout + 2 x store timeout
  # + LEASE_MARGIN_SECONDS), with RUNONCE_STORE_TIMEOUT_SECONDS at its default; a test holds both
  # numbers to the code.
  # The Spanner run table: runonce/stores/spanner.py's DDL, the text `runonce store init` applies (a test
  # holds the two equal). Its row deletion policy deletes a record once expire_at has passed.
  spanner_ddl = replace(chomp(<<EOT
CREATE TABLE {table} (
  run_id STRING(MAX) NOT NULL,
  status STRING(16) NOT NULL,
  attempt_id STRING(64) NOT NULL,
  attempts INT64 NOT NULL,
  lease_expires TIMESTAMP NOT NULL,
  expire_at TIMESTAMP NOT NULL,
  created_at TIMESTAMP NOT NULL,
  updated_at TIMESTAMP NOT NULL,
  route STRING(MAX) NOT NULL,
  source STRING(MAX) NOT NULL,
  project STRING(MAX) NOT NULL,
  location STRING(MAX) NOT NULL,
  job STRING(MAX) NOT NULL,
  schedule_time STRING(MAX),
  task STRING(MAX),
  body_sha256 STRING(64) NOT NULL,
  target STRING(MAX),
  last_error STRING(MAX),
  task_retry_count INT64,
  task_execution_count INT64,
) PRIMARY KEY (run_id),
  ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))
EOT
  ), "{table}", var.spanner_table)

  # runonce-guard's steps table: runonce_guard/stores/spanner.py's DDL, the text `runonce-guard store init`
  # applies (a test holds the two equal), in the same database, for jobs that guard their steps there.
  spanner_steps_ddl = replace(chomp(<<EOT
CREATE TABLE {table} (
  doc_id STRING(MAX) NOT NULL,
  run_id STRING(256) NOT NULL,
  step STRING(100) NOT NULL,
  task STRING(16) NOT NULL,
  status STRING(16) NOT NULL,
  attempt_id STRING(64) NOT NULL,
  attempts INT64 NOT NULL,
  lease_expires TIMESTAMP NOT NULL,
  expire_at TIMESTAMP NOT NULL,
  created_at TIMESTAMP NOT NULL,
  updated_at TIMESTAMP NOT NULL,
  result STRING(MAX),
  last_error STRING(MAX),
  holder STRING(MAX),
) PRIMARY KEY (doc_id),
  ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))
EOT
  ), "{table}", var.spanner_steps_table)

  spanner_store_url = "spanner://projects/${var.project_id}/instances/${var.spanner_instance}/databases/${var.spanner_database}?table=${var.spanner_table}"

  store_violations = concat(
    var.store != "redis" || var.network != null ? [] : [
      "store = \"redis\" needs network: Cloud Run reaches Memorystore only through Direct VPC egress, so set network (e.g. \"default\") to the VPC network the instance is authorized on."
    ],
    var.store != "redis" || var.create_redis_instance || can(regex("^rediss?://", var.redis_url)) ? [] : [
      "store = \"redis\" with create_redis_instance = false needs redis_url = \"redis://HOST:PORT/DB\" or \"rediss://HOST:PORT/DB?ca_file=PATH\"."
    ],
    var.store != "redis" || !var.create_redis_instance || length(var.service_name) <= 40 ? [] : [
      "store = \"redis\": the Memorystore instance is named after service_name, which must then be at most 40 characters (it has ${length(var.service_name)})."
    ],
    var.subnetwork == null || var.network != null ? [] : [
      "subnetwork is set but network is not: Direct VPC egress needs both."
    ],
  )

  store_timeout_seconds = 5
  lease_margin_seconds  = 1

  rule_violations = concat(
    local.store_violations,
    var.audit.enabled || length(var.auditor_token_creators) == 0 ? [] : [
      "auditor_token_creators is set but audit.enabled is false: there is no auditor account to mint tokens of."
    ],
    var.lease_seconds >= var.dispatch_timeout_seconds + 2 * local.store_timeout_seconds + local.lease_margin_seconds ? [] : [
      "lease_seconds (${var.lease_seconds}) must be at least dispatch_timeout_seconds (${var.dispatch_timeout_seconds}) + 2 x the store timeout (${local.store_timeout_seconds}) + ${local.lease_margin_seconds} = ${var.dispatch_timeout_seconds + 2 * local.store_timeout_seconds + local.lease_margin_seconds}: an attempt still dispatching or finishing after its lease could overlap the next one."
    ],
    flatten([for name, job in var.jobs : concat(
      contains(keys(var.routes), job.route) ? [] : [
        "jobs.${name}: route \"${job.route}\" is not in routes (${join(", ", keys(var.routes))})."
      ],
      job.attempt_deadline_seconds >= var.dispatch_timeout_seconds + local.store_margin_seconds ? [] : [
        "jobs.${name}: attempt_deadline_seconds (${job.attempt_deadline_seconds}) must be at least dispatch_timeout_seconds + ${local.store_margin_seconds} = ${var.dispatch_timeout_seconds + local.store_margin_seconds}, or Scheduler abandons attempts runonce is still completing."
      ],
      job.attempt_deadline_seconds <= var.request_timeout_seconds ? [] : [
        "jobs.${name}: attempt_deadline_seconds (${job.attempt_deadline_seconds}) exceeds request_timeout_seconds (${var.request_timeout_seconds})."
      ],
      local.retry_window_seconds[name] >= var.lease_seconds + job.attempt_deadline_seconds ? [] : [
        "jobs.${name}: retries span ${local.retry_window_seconds[name]} s, less than lease_seconds + attempt_deadline_seconds = ${var.lease_seconds + job.attempt_deadline_seconds} s: a run whose attempt died after claiming would never be taken over. Raise retry.retry_count, retry.min_backoff_seconds or retry.max_backoff_seconds."
      ],
      var.retention_seconds > local.retry_window_longest_seconds[name] ? [] : [
        "jobs.${name}: retention_seconds (${var.retention_seconds}) must exceed the longest retry window (${local.retry_window_longest_seconds[name]} s, every attempt taking the whole deadline), or a late retry finds no record and runs again."
      ],
      length(local.retry_starts[name].shortest) < local.retry_cap ? [] : [
        "jobs.${name}: retry.max_retry_duration_seconds allows more than ${local.retry_cap} retries; raise retry.min_backoff_seconds or lower the duration."
      ],
    )]),
  )
}

# Holds the rules above: no infrastructure, only a plan-time check (terraform_data is built in).
resource "terraform_data" "rules" {
  input = local.retry_window_longest_seconds

  lifecycle {
    precondition {
      condition     = length(local.rule_violations) == 0
      error_message = join("\n", local.rule_violations)
    }
  }
}
