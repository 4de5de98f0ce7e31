/**
 * The indexes the claim store lists a route's newest runs through (the overlap guard, the status
 * view, `runonce runs list`), so that a delivery reads what it needs, not the route's history.
 *
 * Firestore: composite indexes on the run collection, each equality field ascending and then
 * created_at descending (runonce/stores/firestore.py's INDEXES; `runonce store init` prints the
 * same as gcloud commands). A list with no filter uses Firestore's automatic single-field index.
 * Spanner: secondary indexes in the database's DDL after the table (runonce/stores/spanner.py's
 * INDEX_DDL; `runonce store init` creates those missing). Appending them to an existing database's
 * DDL updates it in place: Spanner builds the indexes while the table stays in use.
 */

locals {
  firestore_index_fields = {
    route_status = ["route", "status"]
    route        = ["route"]
    status       = ["status"]
  }

  # runonce/stores/spanner.py's INDEX_DDL, statement for statement (a test holds the two equal).
  spanner_index_ddl_templates = [
    "CREATE INDEX {table}_by_route_status ON {table} (route, status, created_at DESC)",
    "CREATE INDEX {table}_by_route ON {table} (route, created_at DESC)",
    "CREATE INDEX {table}_by_status ON {table} (status, created_at DESC)",
  ]
  spanner_index_ddl = [for ddl in local.spanner_index_ddl_templates : replace(ddl, "{table}", var.spanner_table)]
}

resource "google_firestore_index" "runs" {
  for_each = var.store == "firestore" ? local.firestore_index_fields : {}

  project    = var.project_id
  database   = var.create_firestore_database ? google_firestore_database.this[0].name : var.firestore_database
  collection = var.firestore_collection

  dynamic "fields" {
    for_each = each.value
    content {
      field_path = fields.value
      order      = "ASCENDING"
    }
  }
  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }
}
