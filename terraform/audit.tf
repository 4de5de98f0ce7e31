/**
 * Missed runs (docs/how-to/audit-catch-up.md): the audit's own Scheduler job,
 * the account it calls as (runonce's admin caller), and an alert when a scheduled run was missed.
 *
 * The job POSTs /v1/audit:run every 10 minutes with {"since": "10m"}: each audit reports the fire
 * times of the 10 minutes before its schedule time minus the lease, so every fire time is reported
 * by exactly one audit, and applies each route's catch_up. It is keyed like any Scheduler delivery,
 * so its retries and duplicates replay instead of auditing twice. Its retry settings are the jobs'
 * defaults, which satisfy the retry rule of rules.tf (a test holds them there).
 *
 * The alert counts log lines, not the Prometheus counter runonce_missed_runs_total: Cloud Run does
 * not scrape /metrics unless a Managed Prometheus sidecar is added, and the counter lives in one
 * instance's memory, which Cloud Run discards when it scales in. Each missed run is one ERROR line
 * with jsonPayload.outcome = "missed", which Cloud Logging keeps and counts whatever the instance.
 */

locals {
  audit_enabled          = var.audit.enabled
  audit_schedule         = "*/10 * * * *"
  audit_body             = jsonencode({ since = "10m" })
  audit_retry            = { retry_count = 5, min_backoff_seconds = 20, max_backoff_seconds = 300, max_doublings = 4 }
  missed_runs_metric     = "runonce/missed_runs"
  admin_callers          = concat(var.admin_callers, local.audit_enabled ? [google_service_account.auditor[0].email] : [])
  missed_runs_log_filter = <<-EOT
    resource.type="cloud_run_revision"
    resource.labels.service_name="${var.service_name}"
    severity=ERROR
    jsonPayload.outcome="missed"
  EOT
}

resource "google_service_account" "auditor" {
  count = local.audit_enabled ? 1 : 0

  project      = var.project_id
  account_id   = var.auditor_service_account_id
  display_name = "runonce auditor"
  description  = "The audit's Scheduler job signs its OIDC tokens as this account: runonce's admin caller (RUNONCE_ADMIN_CALLERS)."

  depends_on = [google_project_service.apis]
}

resource "google_cloud_run_v2_service_iam_member" "auditor" {
  count = local.audit_enabled ? 1 : 0

  project  = google_cloud_run_v2_service.this["primary"].project
  location = google_cloud_run_v2_service.this["primary"].location
  name     = google_cloud_run_v2_service.this["primary"].name
  role     = "roles/run.invoker"
  member   = google_service_account.auditor[0].member
}

# Who may mint the auditor's identity tokens, to read runs through the admin API as it (smoke.sh).
resource "google_service_account_iam_member" "auditor_token_creators" {
  for_each = local.audit_enabled ? toset(var.auditor_token_creators) : toset([])

  service_account_id = google_service_account.auditor[0].name
  role               = "roles/iam.serviceAccountOpenIdTokenCreator"
  member             = each.value
}

resource "google_cloud_scheduler_job" "audit" {
  count = local.audit_enabled ? 1 : 0

  project          = var.project_id
  region           = local.scheduler_region
  name             = var.audit.job_name
  description      = "runonce audit: reports scheduled runs that left no record, and catches up routes with catch_up."
  schedule         = local.audit_schedule
  time_zone        = "Etc/UTC"
  attempt_deadline = "${var.request_timeout_seconds}s" # the audit and its catch-ups answer in one request

  http_target {
    http_method = "POST"
    uri         = "${local.service_url}/v1/audit:run?project=${var.project_id}&location=${local.scheduler_region}"
    body        = base64encode(local.audit_body)
    headers     = { "Content-Type" = "application/json" }

    oidc_token {
      service_account_email = google_service_account.auditor[0].email
      audience              = local.service_url
    }
  }

  retry_config {
    retry_count          = local.audit_retry.retry_count
    min_backoff_duration = "${local.audit_retry.min_backoff_seconds}s"
    max_backoff_duration = "${local.audit_retry.max_backoff_seconds}s"
    max_doublings        = local.audit_retry.max_doublings
  }

  depends_on = [google_cloud_run_v2_service_iam_member.auditor, terraform_data.rules]
}

resource "google_logging_metric" "missed_runs" {
  count = local.audit_enabled ? 1 : 0

  project     = var.project_id
  name        = local.missed_runs_metric
  description = "Scheduled runs runonce's audit found no record of, by route (one ERROR line each)."
  filter      = local.missed_runs_log_filter

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "runonce missed runs"

    labels {
      key         = "route"
      value_type  = "STRING"
      description = "runonce route name"
    }
  }

  label_extractors = {
    route = "EXTRACT(jsonPayload.route)"
  }
}

resource "google_monitoring_alert_policy" "missed_runs" {
  count = local.alerts_on.missed_runs ? 1 : 0

  project               = var.project_id
  display_name          = "runonce: a scheduled run was missed"
  combiner              = "OR"
  notification_channels = local.alert_channels

  conditions {
    display_name = "missed runs > 0"

    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"logging.googleapis.com/user/${google_logging_metric.missed_runs[0].name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "600s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["metric.label.route"]
      }

      trigger {
        count = 1
      }
    }
  }

  alert_strategy {
    auto_close = "86400s"
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "runonce: a scheduled run did not run"
    content   = <<-EOT
      **What it means.** The audit found a fire time of a route that left no record in runonce's store (no delivery reached runonce), or whose record says `failed` (nothing was dispatched and Scheduler's retries ran out). The run did not happen.

      **How to look.**
      - `runonce audit --since 1d`: every missed fire time, with route, job, schedule time, run_id and why.
      - `runonce status`: the missed fire times per route, next to the last success.
      - Logs: `resource.type="cloud_run_revision" resource.labels.service_name="${var.service_name}" jsonPayload.outcome="missed"`.

      **What to do.** Routes with `catch_up` are run by the audit itself. Otherwise `runonce backfill ROUTE --from T --to T` runs the missed fire times with the run_ids Scheduler's deliveries would have had (a run that did happen replays). Then find why it was missed: `gcloud scheduler jobs describe JOB` (paused? last attempt's status?).

      **Retries.** A fire time is audited only once it is older than the lease, and a run that a retry completed has a completed record, so it is not missed. A run still failed at that point is reported even if a later retry completes it (that retry and a backfill are one run).
    EOT
  }
}
