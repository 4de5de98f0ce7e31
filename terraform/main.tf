/**
 * runonce on Cloud Run: the service, the two service accounts, and who may call it.
 *
 * Scheduler jobs (scheduler.tf) call the service with an OIDC token of the invoker account; the
 * service runs as the runtime account, which holds only what its routes' targets need (iam.tf) and
 * its Firestore claim store (firestore.tf).
 */

locals {
  # The deterministic run.app URL, known before the service exists: it is both the Scheduler jobs'
  # target and the audience runonce checks in their OIDC tokens (RUNONCE_AUDIENCE), so the service
  # does not depend on its own output.
  service_url = "https://${var.service_name}-${data.google_project.this.number}.${var.region}.run.app"

  runonce_env = {
    RUNONCE_STORE                    = "firestore"
    RUNONCE_FIRESTORE_PROJECT        = var.project_id
    RUNONCE_FIRESTORE_DATABASE       = var.firestore_database
    RUNONCE_FIRESTORE_COLLECTION     = var.firestore_collection
    RUNONCE_ROUTES                   = jsonencode({ routes = var.routes })
    RUNONCE_AUTH                     = var.auth
    RUNONCE_AUDIENCE                 = local.service_url
    RUNONCE_ALLOWED_CALLERS          = google_service_account.invoker.email
    RUNONCE_LEASE_SECONDS            = tostring(var.lease_seconds)
    RUNONCE_DISPATCH_TIMEOUT_SECONDS = tostring(var.dispatch_timeout_seconds)
    RUNONCE_RETENTION_SECONDS        = tostring(var.retention_seconds)
  }
  container_env = merge(var.env, local.runonce_env)

  apis = var.enable_apis ? toset([
    "cloudscheduler.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "run.googleapis.com",
  ]) : toset([])
}

data "google_project" "this" {
  project_id = var.project_id
}

resource "google_project_service" "apis" {
  for_each = local.apis

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

resource "google_service_account" "runtime" {
  project      = var.project_id
  account_id   = var.runtime_service_account_id
  display_name = "runonce runtime"
  description  = "Identity of the runonce Cloud Run service: claim store and the targets of its routes."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "invoker" {
  project      = var.project_id
  account_id   = var.invoker_service_account_id
  display_name = "runonce invoker"
  description  = "Cloud Scheduler jobs sign their OIDC tokens as this account to call runonce."

  depends_on = [google_project_service.apis]
}

resource "google_cloud_run_v2_service" "this" {
  project  = var.project_id
  location = var.region
  name     = var.service_name
  labels   = var.labels

  ingress              = var.ingress
  invoker_iam_disabled = false # every request needs roles/run.invoker: only the invoker account has it
  deletion_protection  = var.deletion_protection

  template {
    service_account                  = google_service_account.runtime.email
    timeout                          = "${var.request_timeout_seconds}s"
    max_instance_request_concurrency = 80

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    containers {
      image = var.image

      ports {
        container_port = 8080
      }

      dynamic "env" {
        for_each = local.container_env
        content {
          name  = env.key
          value = env.value
        }
      }

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        cpu_idle          = true
        startup_cpu_boost = true
      }

      startup_probe {
        http_get {
          path = "/healthz"
        }
        period_seconds    = 1
        failure_threshold = 30
        timeout_seconds   = 1
      }
    }
  }

  depends_on = [
    google_project_iam_member.runtime_datastore,
    google_project_iam_member.runtime_self_check,
    google_firestore_field.expire_at_ttl,
    terraform_data.rules,
  ]
}

# Only the invoker account may call the service: no allUsers, no allAuthenticatedUsers.
resource "google_cloud_run_v2_service_iam_member" "invoker" {
  project  = google_cloud_run_v2_service.this.project
  location = google_cloud_run_v2_service.this.location
  name     = google_cloud_run_v2_service.this.name
  role     = "roles/run.invoker"
  member   = google_service_account.invoker.member
}
