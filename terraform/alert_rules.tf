/**
 * Which alert policies exist, and how long each scheduled job may go without progress: plain values
 * with no provider, so tests evaluate them with terraform itself (alerts.tf makes the policies).
 *
 * No progress: a job's longest gap between two fire times is derived from its schedule (unix-cron
 * that fires every day: minute and hour fields of numbers, lists, ranges and steps), so `*\/5` gets
 * minutes and a twice-a-day job hours. A job is watched when its gap times no_progress_factor fits
 * Cloud Monitoring's longest metric-absence window (23.5 h); the others (daily, weekly, monthly,
 * groc) are covered by the missed-runs alert, which checks every fire time.
 */

locals {
  alert_names = ["missed_runs", "no_progress", "runs_unresolved", "target_failures", "store_unavailable", "service_errors", "scheduler_attempts_failing"]
  # missed_runs and runs_unresolved count the audit's lines: no audit, nothing to count.
  alerts_on = {
    for name in local.alert_names : name => (
      var.alerts[name] && (contains(["missed_runs", "runs_unresolved"], name) ? var.audit.enabled : true)
    )
  }
  alert_channels = distinct(concat(var.notification_channels, var.audit.notification_channels))

  longest_absence_seconds = 84600 # 23.5 hours: Cloud Monitoring's longest metric-absence duration

  cron_fields = { for job, spec in var.jobs : job => split(" ", trimspace(replace(spec.schedule, "/\\s+/", " "))) }
  # Fires every day: five fields, day of month, month and day of week all "*".
  cron_daily = {
    for job, f in local.cron_fields : job => f
    if length(f) == 5 && try(f[2] == "*" && f[3] == "*" && f[4] == "*", false)
  }
  cron_minutes = {
    for job, f in local.cron_daily : job => distinct(flatten([
      for part in split(",", f[0]) : (
        part == "*" ? range(0, 60) :
        can(regex("^\\*/(\\d+)$", part)) ? range(0, 60, tonumber(regex("^\\*/(\\d+)$", part)[0])) :
        can(regex("^(\\d+)-(\\d+)(?:/(\\d+))?$", part)) ? range(
          tonumber(regex("^(\\d+)-(\\d+)(?:/(\\d+))?$", part)[0]),
          tonumber(regex("^(\\d+)-(\\d+)(?:/(\\d+))?$", part)[1]) + 1,
          coalesce(regex("^(\\d+)-(\\d+)(?:/(\\d+))?$", part)[2], "1")
        ) :
        can(regex("^\\d+$", part)) ? [tonumber(part)] : []
      )
    ]))
  }
  cron_hours = {
    for job, f in local.cron_daily : job => distinct(flatten([
      for part in split(",", f[1]) : (
        part == "*" ? range(0, 24) :
        can(regex("^\\*/(\\d+)$", part)) ? range(0, 24, tonumber(regex("^\\*/(\\d+)$", part)[0])) :
        can(regex("^(\\d+)-(\\d+)(?:/(\\d+))?$", part)) ? range(
          tonumber(regex("^(\\d+)-(\\d+)(?:/(\\d+))?$", part)[0]),
          tonumber(regex("^(\\d+)-(\\d+)(?:/(\\d+))?$", part)[1]) + 1,
          coalesce(regex("^(\\d+)-(\\d+)(?:/(\\d+))?$", part)[2], "1")
        ) :
        can(regex("^\\d+$", part)) ? [tonumber(part)] : []
      )
    ]))
  }
  # Minutes of the day it fires at, in order (zero-padded so that sort, which compares text, orders them).
  cron_day_times = {
    for job in keys(local.cron_daily) : job => [
      for text in sort(flatten([
        for h in local.cron_hours[job] : [for m in local.cron_minutes[job] : format("%04d", h * 60 + m)]
      ])) : tonumber(text)
    ]
  }
  # The longest gap between consecutive fire times, the last one of a day to the first of the next included.
  schedule_gap_seconds = {
    for job, times in local.cron_day_times : job => 60 * max([
      for i in range(length(times)) : i + 1 < length(times) ? times[i + 1] - times[i] : 1440 - times[i] + times[0]
    ]...)
    if length(times) > 0
  }
  # Per watched job: its route and the absence window (whole minutes, at least 2: Monitoring's rules).
  no_progress = {
    for job, gap in local.schedule_gap_seconds : job => {
      route   = var.jobs[job].route
      seconds = max(120, ceil(gap * var.no_progress_factor / 60) * 60)
    }
    if gap * var.no_progress_factor <= local.longest_absence_seconds && !var.jobs[job].paused
  }
  # The audit's own job (every 10 minutes, route _audit): if it stops, no missed run is reported either.
  no_progress_watch = merge(local.no_progress, var.audit.enabled ? {
    (var.audit.job_name) = { route = "_audit", seconds = max(120, ceil(600 * var.no_progress_factor / 60) * 60) }
  } : {})
  # More failed attempts of one job in an hour than the fewest retries a job has: a run that one
  # retry fixed leaves fewer; a run that exhausted its retries, or a job failing run after run, more.
  scheduler_attempt_threshold = min(concat([for job in values(var.jobs) : job.retry.retry_count], [5])...)
}
