terraform {
  # 1.4+: optional() attributes with defaults, lifecycle preconditions, terraform_data.
  required_version = ">= 1.4"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.8, < 8" # 6.8.0: invoker_iam_disabled on google_cloud_run_v2_service
    }
  }

  provider_meta "google" {
    module_name = "runonce/terraform/v0.2.0.dev0"
  }
}
