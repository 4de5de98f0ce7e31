/**
 * Cloud Scheduler jobs calling runonce with an OIDC token of the invoker account. Their attempt
 * deadline and retry settings are held to the retry rule in rules.tf.
 *
 * One resource per job and region (regions.tf's regional_jobs): a job in its Scheduler region is
 * keyed by its ID, as it always was; in another region by "ID@REGION". Each calls the service of
 * its own region, with that service's URL as the OIDC audience.
 */

resource "google_cloud_scheduler_job" "this" {
  for_each = local.regional_jobs

  project          = var.project_id
  region           = each.value.region
  name             = each.value.name
  description      = each.value.job.description
  schedule         = each.value.job.schedule
  time_zone        = each.value.job.time_zone
  paused           = each.value.job.paused
  attempt_deadline = "${each.value.job.attempt_deadline_seconds}s"

  http_target {
    http_method = "POST"
    # Scheduler sends no project or location header: the URL carries the job's namespace, the
    # same in every region of the job.
    uri     = "${local.service_urls[each.value.service_region]}${each.value.path}"
    body    = each.value.job.body == null ? null : base64encode(each.value.job.body)
    headers = each.value.job.body == null ? null : { "Content-Type" = "application/json" }

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = local.service_urls[each.value.service_region]
    }
  }

  retry_config {
    retry_count          = each.value.job.retry.retry_count
    min_backoff_duration = "${each.value.job.retry.min_backoff_seconds}s"
    max_backoff_duration = "${each.value.job.retry.max_backoff_seconds}s"
    max_doublings        = each.value.job.retry.max_doublings
    max_retry_duration   = "${each.value.job.retry.max_retry_duration_seconds}s"
  }

  depends_on = [google_cloud_run_v2_service_iam_member.invoker, terraform_data.rules, terraform_data.region_rules]
}
