/**
 * The other claim stores (store = "spanner" | "redis"); Firestore's is in firestore.tf.
 *
 * Spanner: an instance and a database (or existing ones, by name) whose DDL is the run table with
 * its row deletion policy (rules.tf, local.spanner_ddl) and its indexes (indexes.tf), and roles/spanner.databaseUser on that
 * database only.
 * Redis: a Memorystore instance authorized on var.network, reached through the service's Direct VPC
 * egress (main.tf). With transit encryption the service reads the instance's CA from a file that
 * Cloud Run mounts from Secret Manager.
 */

locals {
  spanner         = var.store == "spanner"
  redis           = var.store == "redis"
  create_redis    = local.redis && var.create_redis_instance
  redis_tls       = var.redis_transit_encryption_mode == "SERVER_AUTHENTICATION"
  redis_ca_secret = local.create_redis && local.redis_tls

  redis_ca_dir       = "/etc/runonce/redis-ca"
  redis_ca_file_name = "ca.pem"
  redis_url = !local.redis ? null : !local.create_redis ? var.redis_url : (
    local.redis_tls
    ? "rediss://${google_redis_instance.this[0].host}:${google_redis_instance.this[0].port}/0?ca_file=${local.redis_ca_dir}/${local.redis_ca_file_name}"
    : "redis://${google_redis_instance.this[0].host}:${google_redis_instance.this[0].port}/0"
  )

  spanner_instance_name = local.spanner && var.create_spanner_instance ? google_spanner_instance.this[0].name : var.spanner_instance
  spanner_database_name = local.spanner && var.create_spanner_database ? google_spanner_database.this[0].name : var.spanner_database
}

resource "google_spanner_instance" "this" {
  count = local.spanner && var.create_spanner_instance ? 1 : 0

  project          = var.project_id
  name             = var.spanner_instance
  config           = coalesce(var.spanner_instance_config, "regional-${var.region}")
  display_name     = "runonce"
  processing_units = var.spanner_processing_units
  labels           = var.labels

  depends_on = [google_project_service.apis]
}

resource "google_spanner_database" "this" {
  # checkov:skip=CKV_GCP_93:encrypted at rest with Google-managed keys, like the Firestore store; run records hold run keys and target names, not payloads.
  count = local.spanner && var.create_spanner_database ? 1 : 0

  project          = var.project_id
  instance         = local.spanner_instance_name
  name             = var.spanner_database
  database_dialect = "GOOGLE_STANDARD_SQL"
  ddl              = concat([local.spanner_ddl], local.spanner_index_ddl, [local.spanner_steps_ddl])
  # Run records are the only memory of which runs already happened: losing them re-runs jobs. Spanner
  # refuses to drop the database (as Firestore's delete protection), and Terraform refuses to destroy
  # it; to remove it, set both to false in a copy of the module, or drop it with gcloud.
  deletion_protection    = true
  enable_drop_protection = true

  depends_on = [google_project_service.apis]
}

# Read and write rows of runonce's database, nothing else.
resource "google_spanner_database_iam_member" "runtime" {
  count = local.spanner ? 1 : 0

  project  = var.project_id
  instance = local.spanner_instance_name
  database = local.spanner_database_name
  role     = "roles/spanner.databaseUser"
  member   = google_service_account.runtime.member
}

resource "google_redis_instance" "this" {
  # checkov:skip=CKV_GCP_95:AUTH would put the password in RUNONCE_STORE, a plain environment variable of the service; the instance has only a private address on var.network, and TLS (transit_encryption_mode) is on by default.
  count = local.create_redis ? 1 : 0

  project                 = var.project_id
  region                  = var.region
  name                    = var.service_name
  display_name            = "runonce claim store"
  tier                    = var.redis_tier
  memory_size_gb          = var.redis_memory_size_gb
  authorized_network      = var.network
  connect_mode            = "DIRECT_PEERING"
  transit_encryption_mode = var.redis_transit_encryption_mode
  labels                  = var.labels
  # Memorystore's default volatile-lru evicts keys with a TTL when memory is full, and every run key
  # has one: a claim could vanish and a retry dispatch again. noeviction refuses the write instead
  # (503, nothing dispatched), as docs/how-to/stores.md says.
  redis_configs = { "maxmemory-policy" = "noeviction" }

  depends_on = [google_project_service.apis]
}

resource "google_secret_manager_secret" "redis_ca" {
  count = local.redis_ca_secret ? 1 : 0

  project   = var.project_id
  secret_id = "${var.service_name}-redis-ca"
  labels    = var.labels

  replication {
    auto {}
  }

  depends_on = [google_project_service.apis]
}

resource "google_secret_manager_secret_version" "redis_ca" {
  count = local.redis_ca_secret ? 1 : 0

  secret      = google_secret_manager_secret.redis_ca[0].id
  secret_data = join("", [for ca in google_redis_instance.this[0].server_ca_certs : ca.cert])
}

resource "google_secret_manager_secret_iam_member" "runtime_redis_ca" {
  count = local.redis_ca_secret ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.redis_ca[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.runtime.member
}
