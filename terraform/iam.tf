/**
 * The runtime account's grants, derived from the routes (DESIGN.md, "IAM"): only what each
 * configured target needs, on the one resource where the API allows it, else on its project.
 *
 * | target type         | role                                   | granted on                         |
 * |---------------------|----------------------------------------|------------------------------------|
 * | workflows           | roles/workflows.invoker                | the workflow's project (no per-workflow IAM) |
 * | cloud_run_job       | roles/run.jobsExecutorWithOverrides,   | the job                            |
 * |                     | roles/run.viewer (list executions)     | the job                            |
 * | cloud_build_trigger | roles/cloudbuild.builds.editor         | the trigger's project (no per-trigger IAM) |
 * |                     | roles/iam.serviceAccountUser           | each var.trigger_service_accounts  |
 * | http with audience  | roles/run.invoker                      | each var.downstream_services       |
 * | log                 | nothing                                |                                    |
 */

# The claim store, limited by an IAM condition to runonce's own database.
resource "google_project_iam_member" "runtime_datastore" {
  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.runtime.member

  condition {
    title       = "runonce-database-only"
    description = "Only runonce's Firestore database."
    expression  = "resource.name == \"projects/${var.project_id}/databases/${var.firestore_database}\""
  }
}

resource "google_project_iam_member" "runtime_workflows" {
  for_each = local.workflow_projects

  project = each.value
  role    = "roles/workflows.invoker"
  member  = google_service_account.runtime.member
}

resource "google_cloud_run_v2_job_iam_member" "runtime" {
  for_each = local.run_job_grants

  project  = each.value.job.project
  location = each.value.job.location
  name     = each.value.job.name
  role     = each.value.role
  member   = google_service_account.runtime.member
}

resource "google_project_iam_member" "runtime_cloudbuild" {
  # checkov:skip=CKV_GCP_49:triggers.run needs cloudbuild.builds.create, which only project-level roles carry (no per-trigger IAM); granted only in projects of cloud_build_trigger routes.
  for_each = local.build_projects

  project = each.value
  role    = "roles/cloudbuild.builds.editor"
  member  = google_service_account.runtime.member
}

resource "google_service_account_iam_member" "runtime_acts_as_trigger_sa" {
  for_each = toset(var.trigger_service_accounts)

  service_account_id = "projects/-/serviceAccounts/${each.value}"
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.runtime.member
}

resource "google_cloud_run_v2_service_iam_member" "runtime_invokes_downstream" {
  for_each = local.downstream_services

  project  = each.value.project
  location = each.value.location
  name     = each.value.name
  role     = "roles/run.invoker"
  member   = google_service_account.runtime.member
}
