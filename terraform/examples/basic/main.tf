/**
 * runonce with one log route and one Scheduler job: the smallest deployment that shows a
 * scheduled run going through exactly once. Replace routes.yaml with your own targets.
 */

provider "google" {
  project = var.project_id
  region  = var.region
}

module "runonce" {
  source = "../.."

  project_id = var.project_id
  region     = var.region
  image      = var.image
  routes     = yamldecode(file("${path.module}/routes.yaml")).routes

  jobs = {
    "runonce-demo-every-5-min" = {
      route     = "demo"
      schedule  = "*/5 * * * *"
      time_zone = "Europe/Paris"
      body      = jsonencode({ mode = "demo" })
    }
  }

  # An example you can tear down: production keeps the default (true).
  deletion_protection = false
}
