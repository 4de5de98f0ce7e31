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
  description = "runonce image pushed to Artifact Registry, e.g. europe-west1-docker.pkg.dev/PROJECT/runonce/runonce:0.1.0."
  type        = string
}
