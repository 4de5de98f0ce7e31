variable "project_id" {
  description = "Project to deploy runonce into."
  type        = string
}

variable "region" {
  description = "Region of the Cloud Run service and the Scheduler job."
  type        = string
  default     = "europe-west1"
}

variable "image" {
  description = "runonce image in Artifact Registry, by digest: europe-west1-docker.pkg.dev/PROJECT/runonce/runonce@sha256:... (see docs/getting-started/deploy.md)."
  type        = string
}
