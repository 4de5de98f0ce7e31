terraform {
  required_version = ">= 1.4"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.8, < 8" # 6.8.0: invoker_iam_disabled on google_cloud_run_v2_service
    }
  }
}
