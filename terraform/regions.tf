/**
 * Where runonce runs and where each Scheduler job fires (docs/how-to/two-regions.md).
 *
 * The service runs in region and in each of additional_regions, all on one store. A job fires in
 * each of its regions (default: the Scheduler region alone), and each region's job calls the
 * service of its own region. Every region's job carries the same namespace in its URL,
 * ?project=project_id&location=<the job's first region>, so the deliveries of one fire time from
 * all regions have one run_id and run once. A job in one region keeps the URL, the run_ids and the
 * resource address it always had.
 *
 * Like rules.tf, nothing here calls Google: the module's tests evaluate it offline.
 */

locals {
  # Cloud Run services by resource key. The first region's key stays "primary" whatever the region
  # (main.tf moves the service that existed before additional regions there).
  service_regions = merge({ primary = var.region }, { for region in var.additional_regions : region => region })

  # A Scheduler region calls the service of the same region, else (the Scheduler region of a Cloud
  # Run region without Cloud Scheduler) the service in region.
  job_regions = {
    for name, job in var.jobs : name => coalesce(job.regions, [local.scheduler_region])
  }
  regional_jobs = merge([
    for name, job in var.jobs : {
      for region in local.job_regions[name] :
      (region == local.scheduler_region ? name : "${name}@${region}") => {
        name           = name
        region         = region
        service_region = contains(var.additional_regions, region) ? region : var.region
        path           = "/v1/routes/${job.route}:run?project=${var.project_id}&location=${local.job_regions[name][0]}"
        job            = job
      }
    }
  ]...)

  multi_region = length(var.additional_regions) > 0
  regions_without_service = {
    for name, regions in local.job_regions : name => [
      for region in regions : region if region != local.scheduler_region && !contains(var.additional_regions, region)
    ]
  }
  region_violations = concat(
    contains(var.additional_regions, var.region) ? [
      "additional_regions repeats region (${var.region}): list only the other regions."
    ] : [],
    [for name, regions in local.regions_without_service : "jobs.${name}.regions: ${join(", ", regions)} ${length(regions) == 1 ? "has" : "have"} no runonce service: each region's job calls runonce in its own region, so a job fires only in ${local.scheduler_region} (scheduler_region, else region) or in additional_regions (${join(", ", var.additional_regions)})." if length(regions) > 0],
    [for name, job in var.jobs : "jobs.${name}: route \"${job.route}\" has namespace ${try(var.routes[job.route].namespace.project, "")}/${try(var.routes[job.route].namespace.location, "")}, but the job's regions all carry ${var.project_id}/${local.job_regions[name][0]} in their URL: the audit, catch-up and backfill would key its runs apart from Scheduler's. Set the route's namespace to {project = \"${var.project_id}\", location = \"${local.job_regions[name][0]}\"} (the first region's)." if length(local.job_regions[name]) > 1 && try(var.routes[job.route].namespace, null) != null && (try(var.routes[job.route].namespace.project, "") != var.project_id || try(var.routes[job.route].namespace.location, "") != local.job_regions[name][0])],
    local.multi_region && var.store == "redis" ? [
      "additional_regions needs a multi-region store: a Memorystore instance lives in one region, and its outage stops every region's runonce. Use store = \"firestore\" with firestore_location = \"nam5\" or \"eur3\", or store = \"spanner\" with a multi-region spanner_instance_config such as \"nam3\" or \"eur3\"."
    ] : [],
    local.multi_region && var.store == "firestore" && var.create_firestore_database && can(regex("^[a-z]+-[a-z]+[0-9]+$", local.firestore_location)) ? [
      "additional_regions needs a multi-region store: firestore_location is ${local.firestore_location}, one region, whose outage stops every region's runonce. Set firestore_location to a multi-region location such as \"nam5\" or \"eur3\"."
    ] : [],
    local.multi_region && var.store == "spanner" && var.create_spanner_instance && startswith(coalesce(var.spanner_instance_config, "regional-${var.region}"), "regional-") ? [
      "additional_regions needs a multi-region store: the Spanner instance config ${coalesce(var.spanner_instance_config, "regional-${var.region}")} is one region, whose outage stops every region's runonce. Set spanner_instance_config to a multi-region configuration such as \"nam3\" or \"eur3\"."
    ] : [],
  )
}

# Holds the rules above at plan time, like terraform_data.rules (rules.tf).
resource "terraform_data" "region_rules" {
  input = keys(local.regional_jobs)

  lifecycle {
    precondition {
      condition     = length(local.region_violations) == 0
      error_message = join("\n", local.region_violations)
    }
  }
}
