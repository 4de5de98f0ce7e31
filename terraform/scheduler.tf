/**
 * Cloud Scheduler jobs calling runonce with an OIDC token of the invoker account. Their attempt
 * deadline and retry settings are held to the retry rule in rules.tf.
 */

resource "google_cloud_scheduler_job" "this" {
  for_each = var.jobs

  project          = var.project_id
  region           = local.scheduler_region
  name             = each.key
  description      = each.value.description
  schedule         = each.value.schedule
  time_zone        = each.value.time_zone
  paused           = each.value.paused
  attempt_deadline = "${each.value.attempt_deadline_seconds}s"

  http_target {
    http_method = "POST"
    # Scheduler sends no project or location header: the URL carries the job's namespace.
    uri     = "${local.service_url}/v1/routes/${each.value.route}:run?project=${var.project_id}&location=${local.scheduler_region}"
    body    = each.value.body == null ? null : base64encode(each.value.body)
    headers = each.value.body == null ? null : { "Content-Type" = "application/json" }

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = local.service_url
    }
  }

  retry_config {
    retry_count          = each.value.retry.retry_count
    min_backoff_duration = "${each.value.retry.min_backoff_seconds}s"
    max_backoff_duration = "${each.value.retry.max_backoff_seconds}s"
    max_doublings        = each.value.retry.max_doublings
    max_retry_duration   = "${each.value.retry.max_retry_duration_seconds}s"
  }

  depends_on = [google_cloud_run_v2_service_iam_member.invoker, terraform_data.rules]
}
