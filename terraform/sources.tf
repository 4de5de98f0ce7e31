/**
 * Pub/Sub push subscriptions and Eventarc triggers pointed at runonce (variables and rules in
 * sources_rules.tf). They sign their OIDC tokens as the invoker account, as the Scheduler jobs do:
 * it may invoke the service (main.tf) and is runonce's RUNONCE_ALLOWED_CALLERS; the token's
 * audience is the service URL, runonce's RUNONCE_AUDIENCE. Google's own agents get what they need
 * for that: Pub/Sub mints the invoker's tokens and moves refused messages to the dead-letter topics;
 * Cloud Storage publishes its events for Eventarc.
 */

locals {
  pubsub_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  source_apis = toset(concat(
    length(var.push_subscriptions) > 0 ? ["pubsub.googleapis.com"] : [],
    length(var.eventarc_triggers) > 0 ? ["eventarc.googleapis.com", "pubsub.googleapis.com"] : [],
  ))
}

resource "google_project_service" "source_apis" {
  for_each = var.enable_apis ? local.source_apis : toset([])

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

resource "google_pubsub_topic" "dead_letter" {
  # checkov:skip=CKV_GCP_83:encrypted at rest with Google-managed keys; it receives the messages of a topic the user created, so a user who needs CMEK names a dead_letter_topic of their own.
  for_each = local.dead_letter_topics_created

  project = var.project_id
  name    = each.value

  depends_on = [google_project_service.source_apis]
}

resource "google_pubsub_subscription" "push" {
  for_each = var.push_subscriptions

  project              = var.project_id
  name                 = each.key
  topic                = local.push_topics[each.key]
  ack_deadline_seconds = each.value.ack_deadline_seconds
  filter               = each.value.filter

  push_config {
    push_endpoint = "${local.service_url}/v1/routes/${each.value.route}:run"

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = local.service_url # the push endpoint URL by default, which runonce does not accept
    }
  }

  retry_policy {
    minimum_backoff = "${each.value.min_backoff_seconds}s"
    maximum_backoff = "${each.value.max_backoff_seconds}s"
  }

  dead_letter_policy {
    dead_letter_topic     = local.dead_letter_topics[each.key]
    max_delivery_attempts = each.value.max_delivery_attempts
  }

  depends_on = [
    google_cloud_run_v2_service_iam_member.invoker,
    google_service_account_iam_member.pubsub_signs_as_invoker,
    google_pubsub_topic.dead_letter,
    terraform_data.source_rules,
  ]
}

# Pub/Sub signs the push tokens as the invoker account.
resource "google_service_account_iam_member" "pubsub_signs_as_invoker" {
  count = length(var.push_subscriptions) > 0 ? 1 : 0

  service_account_id = google_service_account.invoker.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

# A message runonce refuses for good goes to its dead-letter topic: Pub/Sub publishes there and
# acknowledges on the subscription.
resource "google_pubsub_topic_iam_member" "pubsub_dead_letters" {
  for_each = local.dead_letter_topics

  project = split("/", each.value)[1]
  topic   = split("/", each.value)[3]
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_agent

  depends_on = [google_pubsub_topic.dead_letter]
}

resource "google_pubsub_subscription_iam_member" "pubsub_dead_letters" {
  for_each = google_pubsub_subscription.push

  project      = var.project_id
  subscription = each.value.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}

resource "google_eventarc_trigger" "this" {
  for_each = var.eventarc_triggers

  project         = var.project_id
  location        = coalesce(each.value.location, var.region)
  name            = each.key
  service_account = google_service_account.invoker.email

  dynamic "matching_criteria" {
    for_each = each.value.event_filters
    content {
      attribute = matching_criteria.key
      value     = matching_criteria.value
    }
  }

  destination {
    cloud_run_service {
      service = google_cloud_run_v2_service.this["primary"].name
      region  = var.region
      path    = "/v1/routes/${each.value.route}:run"
    }
  }

  depends_on = [
    google_cloud_run_v2_service_iam_member.invoker,
    google_project_iam_member.invoker_receives_events,
    google_project_iam_member.storage_publishes_events,
    terraform_data.source_rules,
  ]
}

# The trigger's account receives the events it delivers.
resource "google_project_iam_member" "invoker_receives_events" {
  count = length(var.eventarc_triggers) > 0 ? 1 : 0

  project = var.project_id
  role    = "roles/eventarc.eventReceiver"
  member  = google_service_account.invoker.member
}

data "google_storage_project_service_account" "this" {
  count = length(local.storage_triggers) > 0 ? 1 : 0

  project = var.project_id
}

# Cloud Storage publishes its object events to Pub/Sub, which Eventarc delivers from.
resource "google_project_iam_member" "storage_publishes_events" {
  count = length(local.storage_triggers) > 0 ? 1 : 0

  project = var.project_id
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${data.google_storage_project_service_account.this[0].email_address}"
}
