/**
 * The claim store when store = "firestore" (the default): a Firestore (native mode) database and a TTL policy that deletes run records
 * once their `expire_at` (created_at + retention) has passed.
 */

resource "google_firestore_database" "this" {
  count = var.store == "firestore" && var.create_firestore_database ? 1 : 0

  project     = var.project_id
  name        = var.firestore_database
  location_id = local.firestore_location
  type        = "FIRESTORE_NATIVE"
  # Run records are the only memory of which runs already happened: losing them re-runs jobs.
  # `terraform destroy` therefore forgets the database without deleting it (ABANDON), and Firestore
  # refuses to delete it while delete protection is on. No `prevent_destroy`: it would make every
  # plan that destroys the module fail, while these two already keep the data.
  delete_protection_state = "DELETE_PROTECTION_ENABLED"
  deletion_policy         = "ABANDON"

  depends_on = [google_project_service.apis]
}

resource "google_firestore_field" "expire_at_ttl" {
  count = var.store == "firestore" ? 1 : 0

  project    = var.project_id
  database   = var.create_firestore_database ? google_firestore_database.this[0].name : var.firestore_database
  collection = var.firestore_collection
  field      = "expire_at"

  ttl_config {}

  # No query filters or sorts on expire_at: exempting it from single-field indexes avoids the
  # write hotspot of an index on ever-increasing timestamps.
  index_config {}
}
