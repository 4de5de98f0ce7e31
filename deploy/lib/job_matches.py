#!/usr/bin/env python3
"""Exit 0 when an existing Cloud Scheduler job (JSON from `gcloud scheduler jobs describe
--format=json` on stdin) already has every setting we would give it (JSON in argv[1]), else 1
and print the differing fields. Durations compare as seconds; absent numbers as 0 (the API omits
proto3 defaults), so an unchanged job is never rewritten."""

from __future__ import annotations

import json
import sys


def seconds(value: object) -> float:
    text = str(value or "0s")
    return float(text[:-1] if text.endswith("s") else text)


def normalise(job: dict) -> dict:
    http = job.get("httpTarget", {})
    oidc = http.get("oidcToken", {})
    retry = job.get("retryConfig", {})
    headers = {k.lower(): v for k, v in http.get("headers", {}).items() if k.lower() in ("content-type",)}
    return {
        "schedule": job.get("schedule"),
        "timeZone": job.get("timeZone") or "Etc/UTC",
        "description": job.get("description", ""),
        "attemptDeadline": seconds(job.get("attemptDeadline", "180s")),
        "httpTarget.uri": http.get("uri"),
        "httpTarget.httpMethod": http.get("httpMethod", "POST"),
        "httpTarget.body": http.get("body", ""),
        "httpTarget.headers": headers,
        "httpTarget.oidcToken.serviceAccountEmail": oidc.get("serviceAccountEmail"),
        "httpTarget.oidcToken.audience": oidc.get("audience"),
        "retryConfig.retryCount": int(retry.get("retryCount", 0)),
        "retryConfig.minBackoffDuration": seconds(retry.get("minBackoffDuration")),
        "retryConfig.maxBackoffDuration": seconds(retry.get("maxBackoffDuration")),
        "retryConfig.maxDoublings": int(retry.get("maxDoublings", 0)),
        "retryConfig.maxRetryDuration": seconds(retry.get("maxRetryDuration")),
    }


def main() -> None:
    wanted = normalise(json.loads(sys.argv[1]))
    current = normalise(json.load(sys.stdin))
    differing = [key for key in wanted if wanted[key] != current[key]]
    for key in differing:
        print(f"{key}: {current[key]!r} -> {wanted[key]!r}", file=sys.stderr)
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
