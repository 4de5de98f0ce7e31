/**
 * Event sources pointed at runonce: Pub/Sub push subscriptions and Eventarc triggers (sources.tf),
 * their variables, and the rules that tie them to the routes. Like rules.tf, nothing here calls
 * Google: the module's tests evaluate this file with variables.tf and rules.tf alone, offline.
 *
 * The rules: each names a route of its own source (a route with another source refuses every
 * delivery, 400), and a subscription's ack deadline covers a dispatch (dispatch timeout + the store
 * margin), or Pub/Sub pushes a message again while runonce still dispatches it (answered 409 and
 * redelivered: no harm, but noise and delay).
 */

variable "push_subscriptions" {
  description = <<-EOT
    Pub/Sub push subscriptions to runonce, by subscription ID. Each pushes the messages of `topic` (a topic ID in project_id, or projects/P/topics/T)
    to /v1/routes/{route}:run with an OIDC token of the invoker service account, whose audience is the service URL (RUNONCE_AUDIENCE).
    The route needs source = "pubsub". A nacked push backs off from min_backoff_seconds to max_backoff_seconds; after max_delivery_attempts
    the message goes to dead_letter_topic (projects/P/topics/T), or to a topic SUBSCRIPTION-dead-letter created here when it is null.
  EOT
  type = map(object({
    route                 = string
    topic                 = string
    ack_deadline_seconds  = optional(number, 60)
    min_backoff_seconds   = optional(number, 10)
    max_backoff_seconds   = optional(number, 600)
    max_delivery_attempts = optional(number, 10)
    dead_letter_topic     = optional(string)
    filter                = optional(string)
  }))
  default = {}

  validation {
    condition     = alltrue([for name in keys(var.push_subscriptions) : can(regex("^[a-zA-Z][a-zA-Z0-9._~+%-]{2,254}$", name)) && !startswith(name, "goog")])
    error_message = "push_subscriptions keys are subscription IDs: 3-255 letters, digits and . _ ~ + % -, starting with a letter, not with \"goog\"."
  }

  validation {
    condition = alltrue([for s in values(var.push_subscriptions) : (
      s.ack_deadline_seconds >= 10 && s.ack_deadline_seconds <= 600 &&
      s.min_backoff_seconds >= 0 && s.min_backoff_seconds <= s.max_backoff_seconds && s.max_backoff_seconds <= 600 &&
      s.max_delivery_attempts >= 5 && s.max_delivery_attempts <= 100
    )])
    error_message = "push_subscriptions[*]: ack_deadline_seconds 10-600, 0 <= min_backoff_seconds <= max_backoff_seconds <= 600, max_delivery_attempts 5-100 (Pub/Sub's limits)."
  }

  validation {
    condition     = alltrue([for s in values(var.push_subscriptions) : s.dead_letter_topic == null || can(regex("^projects/[^/]+/topics/[^/]+$", s.dead_letter_topic))])
    error_message = "push_subscriptions[*].dead_letter_topic must be a topic's full name, projects/P/topics/T."
  }
}

variable "eventarc_triggers" {
  description = <<-EOT
    Eventarc triggers to runonce's Cloud Run service, by trigger ID: events matching event_filters (attribute => value; `type` is required,
    e.g. { type = "google.cloud.storage.object.v1.finalized", bucket = "uploads" }) are delivered as CloudEvents to /v1/routes/{route}:run
    with an OIDC token of the invoker service account. The route needs source = "cloudevents". location defaults to region (a Cloud Storage
    trigger must be in its bucket's location).
  EOT
  type = map(object({
    route         = string
    event_filters = map(string)
    location      = optional(string)
  }))
  default = {}

  validation {
    condition     = alltrue([for name in keys(var.eventarc_triggers) : can(regex("^[a-z][a-z0-9-]{0,62}$", name))])
    error_message = "eventarc_triggers keys are trigger IDs: 1-63 lower-case letters, digits and '-', starting with a letter."
  }

  validation {
    condition     = alltrue([for t in values(var.eventarc_triggers) : contains(keys(t.event_filters), "type")])
    error_message = "eventarc_triggers[*].event_filters needs a \"type\" (the CloudEvents type, e.g. google.cloud.storage.object.v1.finalized)."
  }
}

locals {
  push_topics = {
    for name, s in var.push_subscriptions : name => (startswith(s.topic, "projects/") ? s.topic : "projects/${var.project_id}/topics/${s.topic}")
  }
  # The dead-letter topics created here (one per subscription that names none), and every subscription's.
  dead_letter_topics_created = { for name, s in var.push_subscriptions : name => "${name}-dead-letter" if s.dead_letter_topic == null }
  dead_letter_topics = {
    for name, s in var.push_subscriptions : name => coalesce(s.dead_letter_topic, "projects/${var.project_id}/topics/${name}-dead-letter")
  }
  storage_triggers = { for name, t in var.eventarc_triggers : name => t if startswith(t.event_filters.type, "google.cloud.storage.") }

  source_violations = concat(
    flatten([for name, s in var.push_subscriptions : concat(
      contains(keys(var.routes), s.route) ? [] : [
        "push_subscriptions.${name}: route \"${s.route}\" is not in routes (${join(", ", keys(var.routes))})."
      ],
      try(var.routes[s.route].source, "scheduler") == "pubsub" || !contains(keys(var.routes), s.route) ? [] : [
        "push_subscriptions.${name}: route \"${s.route}\" has source \"${try(var.routes[s.route].source, "scheduler")}\" and would refuse every push (400): give it source = \"pubsub\"."
      ],
      s.ack_deadline_seconds >= var.dispatch_timeout_seconds + local.store_margin_seconds ? [] : [
        "push_subscriptions.${name}: ack_deadline_seconds (${s.ack_deadline_seconds}) must be at least dispatch_timeout_seconds + ${local.store_margin_seconds} = ${var.dispatch_timeout_seconds + local.store_margin_seconds}, or Pub/Sub pushes a message again while runonce still dispatches it."
      ],
    )]),
    flatten([for name, t in var.eventarc_triggers : concat(
      contains(keys(var.routes), t.route) ? [] : [
        "eventarc_triggers.${name}: route \"${t.route}\" is not in routes (${join(", ", keys(var.routes))})."
      ],
      try(var.routes[t.route].source, "scheduler") == "cloudevents" || !contains(keys(var.routes), t.route) ? [] : [
        "eventarc_triggers.${name}: route \"${t.route}\" has source \"${try(var.routes[t.route].source, "scheduler")}\" and would refuse every event (400): give it source = \"cloudevents\"."
      ],
    )]),
  )
}

# Holds the rules above: a plan-time check only (terraform_data is built in).
resource "terraform_data" "source_rules" {
  input = length(var.push_subscriptions) + length(var.eventarc_triggers)

  lifecycle {
    precondition {
      condition     = length(local.source_violations) == 0
      error_message = join("\n", local.source_violations)
    }
  }
}
