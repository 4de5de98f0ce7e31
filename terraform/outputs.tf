output "service_url" {
  description = "URL of the runonce service (the Scheduler jobs' target and OIDC audience)."
  value       = local.service_url
}

output "service_urls" {
  description = "URL of the runonce service in each region (region and additional_regions), by region: each is its region's Scheduler jobs' target and OIDC audience."
  value       = local.service_urls
}

output "service_name" {
  description = "Name of the Cloud Run service."
  value       = google_cloud_run_v2_service.this["primary"].name
}

output "runtime_service_account_email" {
  description = "Email of the service account runonce runs as."
  value       = google_service_account.runtime.email
}

output "invoker_service_account_email" {
  description = "Email of the service account whose OIDC token Scheduler sends; grant it to other callers' jobs too."
  value       = google_service_account.invoker.email
}

output "auditor_service_account_email" {
  description = "Email of the audit's account, an admin caller: deploy/smoke.sh --reader-sa, for the members of auditor_token_creators (null with audit.enabled = false)."
  value       = one(google_service_account.auditor[*].email)
}

output "firestore_database" {
  description = "Firestore database holding the run records (null unless store = \"firestore\")."
  value       = one(google_firestore_field.expire_at_ttl[*].database)
}

output "store_url" {
  description = "The service's RUNONCE_STORE: \"firestore\", spanner://projects/P/instances/I/databases/D?table=T, or the Memorystore instance's redis(s):// URL."
  value       = local.store_url
}

output "scheduler_job_ids" {
  description = "Full names of the Scheduler jobs, by job ID (\"ID@REGION\" for a job's regions other than the Scheduler region)."
  value       = { for name, job in google_cloud_scheduler_job.this : name => job.id }
}

output "retry_window_seconds" {
  description = "Per job: when the last retry starts, after the first attempt, if every attempt is answered at once (runonce/scheduler_retry.py's shortest window)."
  value       = local.retry_window_seconds
}

output "retry_window_longest_seconds" {
  description = "Per job: when the last attempt ends, after the first one started, if every attempt takes the whole attempt deadline (retention must exceed it)."
  value       = local.retry_window_longest_seconds
}

output "log_based_metrics" {
  description = "Log-based metric types, by outcome (logging.googleapis.com/user/<name> in Cloud Monitoring)."
  value       = { for outcome, metric in google_logging_metric.outcomes : outcome => "logging.googleapis.com/user/${metric.name}" }
}

output "dashboard_id" {
  description = "The Cloud Monitoring dashboard \"runonce\" (projects/P/dashboards/ID), or null with dashboard = false."
  value       = var.dashboard ? google_monitoring_dashboard.this[0].id : null
}

output "alert_policies" {
  description = "The alert policies made, by alerts key (no_progress: by job), as projects/P/alertPolicies/ID."
  value = merge(
    { for name, policy in google_monitoring_alert_policy.no_progress : "no_progress/${name}" => policy.name },
    { for policy in google_monitoring_alert_policy.missed_runs : "missed_runs" => policy.name },
    { for policy in google_monitoring_alert_policy.runs_unresolved : "runs_unresolved" => policy.name },
    { for policy in google_monitoring_alert_policy.target_failures : "target_failures" => policy.name },
    { for policy in google_monitoring_alert_policy.store_unavailable : "store_unavailable" => policy.name },
    { for policy in google_monitoring_alert_policy.service_errors : "service_errors" => policy.name },
    { for policy in google_monitoring_alert_policy.scheduler_attempts_failing : "scheduler_attempts_failing" => policy.name },
  )
}
