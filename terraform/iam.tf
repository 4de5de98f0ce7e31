/**
 * The runtime account's grants, derived from the routes (docs/how-to/iam.md): only what each
 * configured target needs, on the one resource where the API allows it, else on its project.
 *
 * | target type         | role                                   | granted on                         |
 * |---------------------|----------------------------------------|------------------------------------|
 * | workflows           | roles/workflows.invoker                | the workflow's project (no per-workflow IAM) |
 * | cloud_run_job       | roles/run.jobsExecutorWithOverrides,   | the job                            |
 * |                     | runonceExecutionReader (custom: run.executions.get/list) | the job          |
 * | cloud_build_trigger | runonceBuildRunner (custom: cloudbuild.builds.create/get/list), | the trigger's project (no per-trigger IAM) |
 * |                     | or roles/cloudbuild.builds.editor with cloud_build_role = "predefined" |   |
 * |                     | roles/iam.serviceAccountUser           | each var.trigger_service_accounts  |
 * | bigquery_job        | roles/bigquery.jobUser                 | the route's project (data access is yours to grant) |
 * | cloud_tasks_task    | roles/cloudtasks.enqueuer,             | the queue                          |
 * |                     | roles/cloudtasks.viewer (tasks.get)    | the queue                          |
 * |                     | roles/iam.serviceAccountUser           | each http_request.oidc_token account |
 * | batch_job           | roles/batch.jobsEditor                 | the route's project                |
 * | dataflow_flex_template | roles/dataflow.developer            | the route's project                |
 * | dataproc_batch      | runonceDataprocBatchRunner (custom: dataproc.batches.create/get) | the route's project |
 * | vertex_pipeline_job | roles/aiplatform.user                  | the route's project                |
 * |   (all four)        | roles/iam.serviceAccountUser           | the service account the workload runs as, when the route names it |
 * | http with audience  | roles/run.invoker                      | each var.downstream_services       |
 * | google_api          | none derived: grant what the route's method needs yourself |            |
 * | log                 | nothing                                |                                    |
 *
 * The claim store: roles/datastore.user on the Firestore database (below), roles/spanner.databaseUser
 * on the Spanner database, or roles/secretmanager.secretAccessor on the Memorystore CA's secret (stores.tf).
 */

# The Firestore claim store (Spanner's grant is in stores.tf), limited by an IAM condition to runonce's own database.
resource "google_project_iam_member" "runtime_datastore" {
  count = var.store == "firestore" ? 1 : 0

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

# Custom roles live in the project of the resource they are granted on: a project-level custom role
# can be granted nowhere else. deploy/lib/routes_iam.py defines the same ones.
resource "google_project_iam_custom_role" "execution_reader" {
  for_each = local.run_job_projects

  project     = each.value
  role_id     = "runonceExecutionReader"
  title       = "runonce: execution reader"
  description = "Read Cloud Run job executions, to reconcile runs (roles/run.jobsExecutorWithOverrides cannot)."
  permissions = ["run.executions.get", "run.executions.list"]
}

resource "google_project_iam_custom_role" "build_runner" {
  for_each = var.cloud_build_role == "custom" ? local.build_projects : toset([])

  project     = each.value
  role_id     = "runonceBuildRunner"
  title       = "runonce: build runner"
  description = "Run Cloud Build triggers (triggers.run needs cloudbuild.builds.create) and read builds, to reconcile runs."
  permissions = ["cloudbuild.builds.create", "cloudbuild.builds.get", "cloudbuild.builds.list"]
}

resource "google_cloud_run_v2_job_iam_member" "runtime" {
  for_each = local.run_job_grants

  project  = each.value.job.project
  location = each.value.job.location
  name     = each.value.job.name
  role     = each.value.role
  member   = google_service_account.runtime.member

  depends_on = [google_project_iam_custom_role.execution_reader]
}

resource "google_project_iam_member" "runtime_cloudbuild" {
  # checkov:skip=CKV_GCP_49:triggers.run needs cloudbuild.builds.create, which is granted per project only (no per-trigger IAM); the custom runonceBuildRunner by default, only in projects of cloud_build_trigger routes.
  for_each = local.build_projects

  project = each.value
  role    = var.cloud_build_role == "custom" ? google_project_iam_custom_role.build_runner[each.value].name : "roles/cloudbuild.builds.editor"
  member  = google_service_account.runtime.member
}

# Run BigQuery jobs in each bigquery_job route's project; the datasets a job reads and writes need
# their own grants (docs/how-to/iam.md): runonce cannot tell them from the SQL.
resource "google_project_iam_member" "runtime_bigquery" {
  for_each = local.bigquery_projects

  project = each.value
  role    = "roles/bigquery.jobUser"
  member  = google_service_account.runtime.member
}

# Create the batch workloads in each route's project and read them back (reconcile, overlap).
resource "google_project_iam_member" "runtime_workloads" {
  for_each = local.workload_project_grants

  project = each.value.project
  role    = each.value.role
  member  = google_service_account.runtime.member
}

resource "google_project_iam_custom_role" "dataproc_batch_runner" {
  for_each = local.dataproc_projects

  project     = each.value
  role_id     = "runonceDataprocBatchRunner"
  title       = "runonce: Dataproc batch runner"
  description = "Create Dataproc Serverless batches and read them, to reconcile runs (roles/dataproc.editor would also manage clusters and jobs)."
  permissions = ["dataproc.batches.create", "dataproc.batches.get"]
}

resource "google_project_iam_member" "runtime_dataproc" {
  for_each = local.dataproc_projects

  project = each.value
  role    = google_project_iam_custom_role.dataproc_batch_runner[each.value].name
  member  = google_service_account.runtime.member
}

# A batch workload runs as the service account its route names: creating it needs actAs on it.
resource "google_service_account_iam_member" "runtime_acts_as_workload_account" {
  for_each = setsubtract(local.workload_service_accounts, setunion(var.trigger_service_accounts, local.task_token_accounts)) # one binding per account

  service_account_id = "projects/-/serviceAccounts/${each.value}"
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.runtime.member
}

resource "google_service_account_iam_member" "runtime_acts_as_trigger_sa" {
  for_each = toset(var.trigger_service_accounts)

  service_account_id = "projects/-/serviceAccounts/${each.value}"
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.runtime.member
}

resource "google_cloud_tasks_queue_iam_member" "runtime" {
  for_each = local.tasks_queue_grants

  project  = each.value.queue.project
  location = each.value.queue.location
  name     = each.value.queue.name
  role     = each.value.role
  member   = google_service_account.runtime.member
}

resource "google_service_account_iam_member" "runtime_acts_as_task_token_account" {
  for_each = setsubtract(local.task_token_accounts, var.trigger_service_accounts) # one binding per account

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

# RUNONCE_AUTH=cloud_run_iam checks at start-up that the invoker check is on and that nobody public
# may invoke: it reads its own service and that service's IAM policy, and nothing else.
resource "google_project_iam_custom_role" "service_self_check" {
  count = var.auth == "cloud_run_iam" ? 1 : 0

  project     = var.project_id
  role_id     = "runonceServiceSelfCheck"
  title       = "runonce: service self-check"
  description = "Read runonce's own Cloud Run service and its IAM policy (RUNONCE_AUTH=cloud_run_iam start-up check)."
  permissions = ["run.services.get", "run.services.getIamPolicy"]
}

# On the project with a condition naming the service, not on the service itself: the first revision
# runs the check while it starts, before a grant on the service could exist.
resource "google_project_iam_member" "runtime_self_check" {
  count = var.auth == "cloud_run_iam" ? 1 : 0

  project = var.project_id
  role    = google_project_iam_custom_role.service_self_check[0].name
  member  = google_service_account.runtime.member

  condition {
    title       = "runonce-own-service-only"
    description = "Only runonce's own Cloud Run service (one per region)."
    expression  = join(" || ", [for region in values(local.service_regions) : "resource.name == \"projects/${var.project_id}/locations/${region}/services/${var.service_name}\""])
  }
}
