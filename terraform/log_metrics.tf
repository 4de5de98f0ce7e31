/**
 * Log-based metrics the dashboard and the alerts chart (docs/operating.md). Each counts runonce's
 * own lines in Cloud Logging, which keeps them whatever instance wrote them: one line per delivery
 * (logger runonce.access, with outcome, route, target_type, attempt, lateness_seconds and, on a
 * retry that made a failed answer good, recovered_failure) and the
 * audit's lines (outcome "missed", "unresolved"). Cloud Scheduler's own attempt log is counted too.
 * They exist when the dashboard or any alert is on.
 */

locals {
  observability = var.dashboard || anytrue(values(local.alerts_on))
  service_logs  = <<-EOT
    resource.type="cloud_run_revision"
    resource.labels.service_name="${var.service_name}"
  EOT
  delivery_logs = "${local.service_logs}jsonPayload.logger=\"runonce.access\"\njsonPayload.outcome:*\n"
  # The 5xx answers runonce documents (docs/reference/statuses.md): any other 5xx is a bug.
  documented_5xx = ["failed", "unavailable", "unknown"]
  scheduler_jobs = concat(keys(var.jobs), local.audit_enabled ? [var.audit.job_name] : [])
}

resource "google_logging_metric" "deliveries" {
  count = local.observability ? 1 : 0

  project     = var.project_id
  name        = "runonce/deliveries"
  description = "runonce deliveries, one per answer, by route, outcome (the response's status), skip reason and target type."
  filter      = local.delivery_logs

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "runonce deliveries"

    labels {
      key         = "route"
      value_type  = "STRING"
      description = "runonce route name"
    }
    labels {
      key         = "outcome"
      value_type  = "STRING"
      description = "the answer's status: processed, duplicate, skipped, failed, unknown, ..."
    }
    labels {
      key         = "reason"
      value_type  = "STRING"
      description = "why a run was skipped: late or overlap"
    }
    labels {
      key         = "target_type"
      value_type  = "STRING"
      description = "the route's target type"
    }
  }

  label_extractors = {
    route       = "EXTRACT(jsonPayload.route)"
    outcome     = "EXTRACT(jsonPayload.outcome)"
    reason      = "EXTRACT(jsonPayload.reason)"
    target_type = "EXTRACT(jsonPayload.target_type)"
  }
}

resource "google_logging_metric" "lateness" {
  count = local.observability ? 1 : 0

  project         = var.project_id
  name            = "runonce/lateness"
  description     = "Seconds from a scheduled run's schedule time to the delivery that dispatched it, by route."
  filter          = "${local.delivery_logs}jsonPayload.outcome=\"processed\"\njsonPayload.lateness_seconds:*\n"
  value_extractor = "EXTRACT(jsonPayload.lateness_seconds)"

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "DISTRIBUTION"
    unit         = "s"
    display_name = "runonce lateness"

    labels {
      key         = "route"
      value_type  = "STRING"
      description = "runonce route name"
    }
  }

  label_extractors = {
    route = "EXTRACT(jsonPayload.route)"
  }

  bucket_options {
    exponential_buckets {
      num_finite_buckets = 20
      growth_factor      = 2
      scale              = 0.1
    }
  }
}

resource "google_logging_metric" "recovered_failures" {
  count = local.observability ? 1 : 0

  project     = var.project_id
  name        = "runonce/recovered_failures"
  description = "Runs a retry completed right after an attempt that answered failed, by route: each made one failed answer good (a throttled, waiting or unknown attempt before it is not a failure and is not counted)."
  filter      = "${local.delivery_logs}jsonPayload.outcome=\"processed\"\njsonPayload.recovered_failure:*\n"

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "runonce failed runs completed by a retry"

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

resource "google_logging_metric" "unresolved_runs" {
  count = local.observability && local.audit_enabled ? 1 : 0

  project     = var.project_id
  name        = "runonce/unresolved_runs"
  description = "Runs the audit found still in_progress three leases after their latest attempt began, by route (one WARNING line each, every audit)."
  filter      = "${local.service_logs}jsonPayload.logger=\"runonce.audit\"\njsonPayload.outcome=\"unresolved\"\n"

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "runonce unresolved runs"

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

resource "google_logging_metric" "store_unavailable" {
  count = local.observability ? 1 : 0

  project     = var.project_id
  name        = "runonce/store_unavailable"
  description = "Answers 503 unavailable (the claim store did not answer) and failed /readyz probes."
  filter      = "${local.service_logs}jsonPayload.logger=\"runonce.access\"\n(jsonPayload.outcome=\"unavailable\" OR (httpRequest.requestUrl=\"/readyz\" AND httpRequest.status=503))\n"

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "runonce store unavailable"
  }
}

resource "google_logging_metric" "service_errors" {
  count = local.observability ? 1 : 0

  project     = var.project_id
  name        = "runonce/service_errors"
  description = "runonce 5xx answers that are not in its status table (failed 502, unavailable 503, unknown 504), and failed /readyz excluded."
  filter      = "${local.service_logs}jsonPayload.logger=\"runonce.access\"\nhttpRequest.status>=500\nNOT jsonPayload.outcome=(${join(" OR ", [for s in local.documented_5xx : "\"${s}\""])})\nNOT httpRequest.requestUrl=\"/readyz\"\n"

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "runonce undocumented 5xx"
  }
}

resource "google_logging_metric" "scheduler_attempts_failed" {
  count = local.observability && length(local.scheduler_jobs) > 0 ? 1 : 0

  project     = var.project_id
  name        = "runonce/scheduler_attempts_failed"
  description = "Cloud Scheduler's failed attempts (AttemptFinished at ERROR) of the jobs that call runonce, by job."
  filter      = <<-EOT
    resource.type="cloud_scheduler_job"
    resource.labels.job_id=(${join(" OR ", [for job in local.scheduler_jobs : "\"${job}\""])})
    jsonPayload."@type"="type.googleapis.com/google.cloud.scheduler.logging.AttemptFinished"
    severity>=ERROR
  EOT

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "runonce Scheduler attempts failed"
  }
}
