/**
 * The Cloud Monitoring dashboard "runonce" (docs/operating.md describes each tile), from
 * dashboard.json: a mosaic layout whose `route` filter narrows every runonce chart to one route.
 * deploy/observability.sh creates the same dashboard from the same file with gcloud.
 */

resource "google_monitoring_dashboard" "this" {
  count = var.dashboard ? 1 : 0

  project        = var.project_id
  dashboard_json = replace(file("${path.module}/dashboard.json"), "$${service_name}", var.service_name)

  depends_on = [google_logging_metric.deliveries, google_logging_metric.lateness, google_logging_metric.unresolved_runs]
}
