/**
 * runonce on Cloud Run: the service, the two service accounts, and who may call it.
 *
 * Scheduler jobs (scheduler.tf) call the service with an OIDC token of the invoker account; the
 * service runs as the runtime account, which holds only what its routes' targets need (iam.tf) and
 * its claim store: Firestore (firestore.tf), Cloud Spanner or Memorystore for Redis (stores.tf).
 */

locals {
  # The deterministic run.app URL, known before the service exists: it is both the Scheduler jobs'
  # target and the audience runonce checks in their OIDC tokens (RUNONCE_AUDIENCE), so the service
  # does not depend on its own output.
  # With additional_regions, one service per region, each its own URL and audience.
  service_urls = {
    for region in values(local.service_regions) : region => "https://${var.service_name}-${data.google_project.this.number}.${region}.run.app"
  }
  service_url = local.service_urls[var.region]

  # RUNONCE_STORE from the store choice; the Firestore settings only with the Firestore store.
  store_url = {
    firestore = "firestore"
    spanner   = local.spanner_store_url
    redis     = local.redis_url
  }[var.store]
  firestore_env = var.store == "firestore" ? {
    RUNONCE_FIRESTORE_PROJECT    = var.project_id
    RUNONCE_FIRESTORE_DATABASE   = var.firestore_database
    RUNONCE_FIRESTORE_COLLECTION = var.firestore_collection
  } : {}

  runonce_env = merge(local.firestore_env, {
    RUNONCE_STORE                    = local.store_url
    RUNONCE_ROUTES                   = jsonencode({ routes = var.routes })
    RUNONCE_AUTH                     = var.auth
    RUNONCE_ALLOWED_CALLERS          = google_service_account.invoker.email
    RUNONCE_ADMIN_CALLERS            = join(",", local.admin_callers)
    RUNONCE_LEASE_SECONDS            = tostring(var.lease_seconds)
    RUNONCE_DISPATCH_TIMEOUT_SECONDS = tostring(var.dispatch_timeout_seconds)
    RUNONCE_RETENTION_SECONDS        = tostring(var.retention_seconds)
  })
  container_env = merge(var.env, local.runonce_env)

  store_apis = {
    firestore = ["firestore.googleapis.com"]
    spanner   = ["spanner.googleapis.com"]
    redis     = ["redis.googleapis.com", "secretmanager.googleapis.com"]
  }[var.store]
  apis = var.enable_apis ? toset(concat([
    "cloudscheduler.googleapis.com",
    "iam.googleapis.com",
    "run.googleapis.com",
  ], local.store_apis)) : toset([])
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

# One service per region (regions.tf): "primary" in region, the others keyed by their region.
resource "google_cloud_run_v2_service" "this" {
  for_each = local.service_regions

  project  = var.project_id
  location = each.value
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

    # Direct VPC egress: Memorystore has only a private address. Only private ranges go through the
    # network; Google APIs and http targets keep the default path.
    dynamic "vpc_access" {
      for_each = var.network == null ? [] : [var.network]
      content {
        network_interfaces {
          network    = vpc_access.value
          subnetwork = var.subnetwork
        }
        egress = "PRIVATE_RANGES_ONLY"
      }
    }

    # The Memorystore instance's CA (transit encryption), for the rediss:// URL's ca_file.
    dynamic "volumes" {
      for_each = local.redis_ca_secret ? ["redis-ca"] : []
      content {
        name = volumes.value
        secret {
          secret = google_secret_manager_secret.redis_ca[0].secret_id
          items {
            version = google_secret_manager_secret_version.redis_ca[0].version
            path    = local.redis_ca_file_name
          }
        }
      }
    }

    containers {
      image = var.image

      ports {
        container_port = 8080
      }

      dynamic "volume_mounts" {
        for_each = local.redis_ca_secret ? ["redis-ca"] : []
        content {
          name       = volume_mounts.value
          mount_path = local.redis_ca_dir
        }
      }

      dynamic "env" {
        for_each = merge(local.container_env, { RUNONCE_AUDIENCE = local.service_urls[each.value] })
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
    google_spanner_database_iam_member.runtime,
    google_secret_manager_secret_iam_member.runtime_redis_ca,
    terraform_data.rules,
  ]
}

# Only the invoker account may call the service: no allUsers, no allAuthenticatedUsers.
resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = google_cloud_run_v2_service.this

  project  = each.value.project
  location = each.value.location
  name     = each.value.name
  role     = "roles/run.invoker"
  member   = google_service_account.invoker.member
}

# The single service of earlier versions is the primary one: state moves, nothing is replaced.
moved {
  from = google_cloud_run_v2_service.this
  to   = google_cloud_run_v2_service.this["primary"]
}

moved {
  from = google_cloud_run_v2_service_iam_member.invoker
  to   = google_cloud_run_v2_service_iam_member.invoker["primary"]
}
