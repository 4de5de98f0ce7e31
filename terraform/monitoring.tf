/**
 * Log-based metrics: a lighter alternative to scraping /metrics. runonce writes exactly one log line
 * per delivery with `jsonPayload.outcome` (the response's status), so counting those lines per
 * outcome charts duplicates suppressed, failures and unknown outcomes without a sidecar.
 */

resource "google_logging_metric" "outcomes" {
  for_each = toset(var.log_based_metric_outcomes)

  project     = var.project_id
  name        = "runonce/deliveries_${each.value}"
  description = "runonce deliveries answered with status ${each.value}, by route."
  filter      = <<-EOT
    resource.type="cloud_run_revision"
    resource.labels.service_name="${var.service_name}"
    jsonPayload.outcome="${each.value}"
  EOT

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "runonce ${each.value} deliveries"

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
