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
 *   3. retry window >= lease + attempt deadline: retries are still coming after a dead attempt's
 *      lease has run out, so one of them completes the run;
 *   4. retention > retry window + attempt deadline: the record outlives every retry, so a late
 *      retry is answered `duplicate` instead of running again.
 * And for the service: dispatch timeout < lease (a dispatch never outlives its claim).
 */

locals {
  scheduler_region   = coalesce(var.scheduler_region, var.region)
  firestore_location = coalesce(var.firestore_location, var.region)

  targets = [for route in values(var.routes) : route.target]

  # projects/P/locations/L/workflows/W -> P
  workflow_projects = toset([
    for t in local.targets : split("/", t.workflow)[1] if t.type == "workflows"
  ])

  # projects/P/locations/L/jobs/J -> {project, location, name}; two roles on each job.
  run_jobs = {
    for job in distinct([for t in local.targets : t.job if t.type == "cloud_run_job"]) : job => {
      project  = split("/", job)[1]
      location = split("/", job)[3]
      name     = split("/", job)[5]
    }
  }
  run_job_grants = {
    for pair in setproduct(keys(local.run_jobs), ["roles/run.jobsExecutorWithOverrides", "roles/run.viewer"]) :
    "${pair[0]} ${pair[1]}" => { job = local.run_jobs[pair[0]], role = pair[1] }
  }

  # projects/P/locations/L/triggers/T -> P
  build_projects = toset([
    for t in local.targets : split("/", t.trigger)[1] if t.type == "cloud_build_trigger"
  ])

  downstream_services = {
    for service in var.downstream_services : service => {
      project  = split("/", service)[1]
      location = split("/", service)[3]
      name     = split("/", service)[5]
    }
  }

  # Scheduler's backoff: the interval doubles max_doublings times from min_backoff, then grows
  # linearly by min_backoff * 2^max_doublings, capped at max_backoff; retry_count intervals in all,
  # cut at max_retry_duration when that is not 0.
  retry_backoffs = {
    for name, job in var.jobs : name => [
      for i in range(1, job.retry.retry_count + 1) : min(job.retry.max_backoff_seconds,
        i <= job.retry.max_doublings + 1 ? job.retry.min_backoff_seconds * pow(2, i - 1) :
      job.retry.min_backoff_seconds * pow(2, job.retry.max_doublings) * (i - job.retry.max_doublings))
    ]
  }
  retry_window_seconds = {
    for name, job in var.jobs : name => (
      job.retry.max_retry_duration_seconds > 0 ?
      min(job.retry.max_retry_duration_seconds, sum(concat([0], local.retry_backoffs[name]))) :
      sum(concat([0], local.retry_backoffs[name]))
    )
  }

  # Claim and finish each wait up to RUNONCE_STORE_TIMEOUT_SECONDS (5 s) on Firestore; three of
  # those is the margin an attempt needs on top of the dispatch timeout.
  store_margin_seconds = 15

  rule_violations = concat(
    var.dispatch_timeout_seconds < var.lease_seconds ? [] : [
      "dispatch_timeout_seconds (${var.dispatch_timeout_seconds}) must be below lease_seconds (${var.lease_seconds}): a dispatch that outlives its lease could run twice."
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
      var.retention_seconds > local.retry_window_seconds[name] + job.attempt_deadline_seconds ? [] : [
        "jobs.${name}: retention_seconds (${var.retention_seconds}) must exceed the retry window plus attempt deadline (${local.retry_window_seconds[name] + job.attempt_deadline_seconds} s), or a late retry finds no record and runs again."
      ],
    )]),
  )
}

# Holds the rules above: no infrastructure, only a plan-time check (terraform_data is built in).
resource "terraform_data" "rules" {
  input = local.retry_window_seconds

  lifecycle {
    precondition {
      condition     = length(local.rule_violations) == 0
      error_message = join("\n", local.rule_violations)
    }
  }
}
