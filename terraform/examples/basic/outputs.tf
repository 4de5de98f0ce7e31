output "service_url" {
  description = "URL of the runonce service."
  value       = module.runonce.service_url
}

output "invoker_service_account_email" {
  description = "Service account the Scheduler job signs its OIDC token as."
  value       = module.runonce.invoker_service_account_email
}

output "scheduler_job_ids" {
  description = "Scheduler jobs created."
  value       = module.runonce.scheduler_job_ids
}
