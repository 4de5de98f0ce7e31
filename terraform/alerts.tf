/**
 * Alert policies, each with its runbook in documentation.content (what it means, how to look, what
 * to do), each switched by var.alerts and notifying var.notification_channels. docs/operating.md
 * has the table, and how each one stays quiet when a Scheduler retry fixed a failed attempt.
 * The missed-runs policy is in audit.tf, next to the audit that writes its lines.
 */

locals {
  user_metric = "logging.googleapis.com/user"
  # PromQL names of log-based metrics: logging_googleapis_com:user_<name with / as _>.
  promql_failed    = "logging_googleapis_com:user_runonce_deliveries{outcome=\"failed\", monitored_resource=\"cloud_run_revision\"}"
  promql_recovered = "logging_googleapis_com:user_runonce_recovered_failures{monitored_resource=\"cloud_run_revision\"}"
}

resource "google_monitoring_alert_policy" "no_progress" {
  for_each = local.alerts_on.no_progress ? local.no_progress_watch : {}

  project               = var.project_id
  display_name          = "runonce: no progress on route ${each.value.route} (job ${each.key})"
  combiner              = "OR"
  notification_channels = local.alert_channels

  conditions {
    display_name = "no processed or skipped run of ${each.value.route} for ${each.value.seconds}s"

    condition_absent {
      filter   = "resource.type = \"cloud_run_revision\" AND metric.type = \"${local.user_metric}/${google_logging_metric.deliveries[0].name}\" AND metric.label.route = \"${each.value.route}\" AND metric.label.outcome = one_of(\"processed\", \"skipped\")"
      duration = "${each.value.seconds}s"

      aggregations {
        alignment_period     = "60s"
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
    subject   = "runonce: route ${each.value.route} has not run for ${each.value.seconds}s"
    content   = <<-EOT
      **What it means.** Route `${each.value.route}` (Scheduler job `${each.key}`) recorded no processed or skipped run for ${each.value.seconds}s: ${var.no_progress_factor} times the longest gap between its fire times. Deliveries stopped arriving (job paused or deleted, wrong URI, invoker lost run.invoker) or every one of them fails.

      **How to look.**
      - `runonce status --route ${each.value.route}`: last fire time and outcome, last success, missed fire times, unresolved runs.
      - `gcloud scheduler jobs describe ${each.key} --location=${local.scheduler_region} --project=${var.project_id}`: state and status of the last attempt.
      - Logs: `resource.type="cloud_run_revision" resource.labels.service_name="${var.service_name}" jsonPayload.route="${each.value.route}"`.

      **What to do.** Resume or fix the job; fix what its attempts answer (see the delivery lines' jsonPayload.outcome and error). Then `runonce audit --route ${each.value.route} --since 1d` lists the fire times that did not run, and `runonce backfill ${each.value.route} --from T --to T` runs them with their own run_ids (one that did run replays).

      **Retries.** A failed attempt that a retry fixed records a processed run within the window, so it never fires.
    EOT
  }
}

resource "google_monitoring_alert_policy" "runs_unresolved" {
  count = local.alerts_on.runs_unresolved ? 1 : 0

  project               = var.project_id
  display_name          = "runonce: runs unresolved"
  combiner              = "OR"
  notification_channels = local.alert_channels

  conditions {
    display_name = "unresolved runs > 0"

    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"${local.user_metric}/${google_logging_metric.unresolved_runs[0].name}\""
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
    auto_close = "3600s"
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "runonce: a run is still in_progress three leases after its latest attempt"
    content   = <<-EOT
      **What it means.** The audit found a run still `in_progress` three leases after its latest attempt began: that attempt crashed or timed out (outcome `unknown`), and no retry has taken it over and reconciled it. The target may or may not have acted.

      **How to look.**
      - `runonce status`: the unresolved runs of each route, with their age.
      - Logs: `resource.type="cloud_run_revision" resource.labels.service_name="${var.service_name}" jsonPayload.outcome="unresolved"` (route, run_id, age_seconds); then `labels.run_id="RUN_ID"` for every line of that run.
      - `runonce runs show RUN_ID`: the record (target, last_error, attempts).

      **What to do.** Check in the target whether the run's execution exists (its resource name is in the record's `target`, or search the target for the run_id). If Scheduler will not retry it any more, the next audit catch-up or `runonce backfill ROUTE --from T --to T` delivers it again: that attempt takes over and reconciles (finds the execution, or dispatches once).

      **Retries.** A retry that takes the run over or completes it removes it from the next audit's report; only runs no retry reached are reported.
    EOT
  }
}

resource "google_monitoring_alert_policy" "target_failures" {
  count = local.alerts_on.target_failures ? 1 : 0

  project               = var.project_id
  display_name          = "runonce: target failures"
  combiner              = "OR"
  notification_channels = local.alert_channels

  conditions {
    display_name = "failed answers not made good by a retry, per route, over an hour"

    condition_prometheus_query_language {
      # failed answers - (failed answers a retry of the same run made good) per route; only an
      # attempt that answered failed is subtracted, never a throttled, waiting or unknown one. A
      # route with no recovered run falls back to its failed answers alone.
      query               = <<-EOT
        (
          (sum by (route) (increase(${local.promql_failed}[1h]))
            - on (route)
          sum by (route) (increase(${local.promql_recovered}[1h])))
          or sum by (route) (increase(${local.promql_failed}[1h]))
        ) > ${var.target_failure_threshold}
      EOT
      duration            = "900s"
      evaluation_interval = "60s"
    }
  }

  alert_strategy {
    auto_close = "86400s"
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "runonce: a target keeps failing"
    content   = <<-EOT
      **What it means.** A route's target answered `failed` (it refused the call and created nothing) more often in the last hour than retries of the same runs made good, for 15 minutes. runonce released each claim, so Scheduler's retries dispatch again; these ran out or keep failing.

      **How to look.**
      - `runonce runs list --route ROUTE --status failed`: the runs and their `last_error` (the target's status and message).
      - `runonce status --route ROUTE`: last success, failed last run, missed fire times.
      - Logs: `resource.type="cloud_run_revision" resource.labels.service_name="${var.service_name}" jsonPayload.outcome="failed"` (route, target_type, error).

      **What to do.** Fix what the error names: a missing grant of runonce's service account on the target (403), a deleted or renamed resource (404), a bad body (400). Then `runonce audit --route ROUTE --since 1d` lists the scheduled runs that did not run, and `runonce backfill ROUTE --from T --to T` runs them once.

      **Retries.** A failed answer that the next retry of the same run made good is subtracted (that retry's line says `recovered_failure`); the earlier attempts of a run that answered throttled, waiting or unknown were not failures and subtract nothing, so a recovered run never hides another run's failure. The condition must hold for 15 minutes, longer than Scheduler's default retries take.
    EOT
  }
}

resource "google_monitoring_alert_policy" "store_unavailable" {
  count = local.alerts_on.store_unavailable ? 1 : 0

  project               = var.project_id
  display_name          = "runonce: claim store unavailable"
  combiner              = "OR"
  notification_channels = local.alert_channels

  conditions {
    display_name = "unavailable answers or failed /readyz > 3 per 5 minutes, for 5 minutes"

    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"${local.user_metric}/${google_logging_metric.store_unavailable[0].name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 3
      duration        = "300s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }

      trigger {
        count = 1
      }
    }
  }

  alert_strategy {
    auto_close = "3600s"
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "runonce: the claim store does not answer"
    content   = <<-EOT
      **What it means.** runonce answered `unavailable` (503: the claim store did not answer within RUNONCE_STORE_TIMEOUT_SECONDS; the target was not called) or failed its /readyz probe, more than 3 times per 5 minutes for 5 minutes. Every delivery is being refused and retried.

      **How to look.**
      - Logs: `resource.type="cloud_run_revision" resource.labels.service_name="${var.service_name}" (jsonPayload.outcome="unavailable" OR httpRequest.requestUrl="/readyz")`: the error says which store operation timed out or was refused.
      - The store's own status (Firestore, Spanner or Memorystore in the console), and runonce's service account's grants on it.
      - `RUNONCE_STORE=... runonce runs list --limit 1` from a workstation: does the store answer at all?

      **What to do.** Restore the store or the grant. Nothing was dispatched while it was down; Scheduler's retries deliver again, and `runonce audit --since 1d` lists the scheduled runs whose retries ran out (`runonce backfill` runs them).

      **Retries.** One 503 that Scheduler's retry got past is one event; it needs more than 3 in each 5 minutes for 5 minutes running.
    EOT
  }
}

resource "google_monitoring_alert_policy" "service_errors" {
  count = local.alerts_on.service_errors ? 1 : 0

  project               = var.project_id
  display_name          = "runonce: undocumented 5xx answers"
  combiner              = "OR"
  notification_channels = local.alert_channels
  severity              = "WARNING"

  conditions {
    display_name = "5xx answers outside the status table > 0"

    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"${local.user_metric}/${google_logging_metric.service_errors[0].name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "600s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
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
    subject   = "runonce: a 5xx answer that is not in its status table"
    content   = <<-EOT
      **What it means.** runonce answered a 5xx other than `failed` (502), `unavailable` (503) and `unknown` (504), the only ones it documents: an unhandled error, a bug. There should be none.

      **How to look.**
      - Logs: `resource.type="cloud_run_revision" resource.labels.service_name="${var.service_name}" jsonPayload.logger="runonce.access" httpRequest.status>=500`, then the ERROR lines with the same trace (the traceback).
      - `runonce runs show RUN_ID` for a delivery line's run_id: its record says whether the run was claimed and how it ended.

      **What to do.** Report it with the traceback and the runonce version. A delivery that got a 500 kept or released its claim as the record shows; Scheduler retries it like any 5xx, and `runonce status` shows whether its run completed.

      **Retries.** Severity WARNING (a ticket, not a page): it notifies on the first one, since a retry that then succeeded leaves the bug in place.
    EOT
  }
}

resource "google_monitoring_alert_policy" "scheduler_attempts_failing" {
  count = local.alerts_on.scheduler_attempts_failing && length(local.scheduler_jobs) > 0 ? 1 : 0

  project               = var.project_id
  display_name          = "runonce: Scheduler attempts failing"
  combiner              = "OR"
  notification_channels = local.alert_channels

  conditions {
    display_name = "failed attempts of one job per hour > ${local.scheduler_attempt_threshold}"

    condition_threshold {
      filter          = "resource.type = \"cloud_scheduler_job\" AND metric.type = \"${local.user_metric}/${google_logging_metric.scheduler_attempts_failed[0].name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = local.scheduler_attempt_threshold
      duration        = "0s"

      aggregations {
        alignment_period     = "3600s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.job_id"]
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
    subject   = "runonce: a Scheduler job's attempts keep failing"
    content   = <<-EOT
      **What it means.** Cloud Scheduler logged more failed attempts (AttemptFinished at ERROR) of one job calling runonce in an hour than the fewest retries a job has (${local.scheduler_attempt_threshold}): a run exhausted its retries, or the job fails run after run. This includes answers runonce never saw (Cloud Run 429/503 at scale-out, a wrong URI, a token runonce refused).

      **How to look.**
      - Logs: `resource.type="cloud_scheduler_job" resource.labels.job_id="JOB" severity>=ERROR`: each entry's `jsonPayload.status` and `httpRequest.status`.
      - `gcloud scheduler jobs describe JOB --location=${local.scheduler_region} --project=${var.project_id}`.
      - `runonce status --route ROUTE`: what runonce recorded for the job's runs.

      **What to do.** By the status: 401/403, fix the invoker account or RUNONCE_ALLOWED_CALLERS; 404, the job's URI or route name; 409 `in_progress`/`waiting`, a run outlasting its schedule (overlap); 502/504, the target (see the target-failures runbook). Then `runonce audit --since 1d` and `runonce backfill` for the runs that did not run.

      **Retries.** One failed attempt that a retry fixed is one entry; the threshold needs more than the job's retries can produce for one run.
    EOT
  }
}
