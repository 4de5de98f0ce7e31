"""Checkov policies for runonce's Terraform: who can reach the service, and how Scheduler calls it.

Checkov's built-in Cloud Run checks miss `google_cloud_run_v2_service_iam_member` with `allUsers`,
Scheduler jobs without OIDC tokens, and v2 services with the invoker IAM check turned off. Run with
`checkov -d terraform --external-checks-dir tests/deploy/checkov_checks`.
"""

from __future__ import annotations

from typing import Any

from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.terraform.checks.resource.base_resource_check import BaseResourceCheck

PUBLIC_MEMBERS = {"allUsers", "allAuthenticatedUsers"}


def _value(conf: dict[str, Any], key: str) -> Any:
    """Checkov wraps every HCL value in a one-element list."""
    value = conf.get(key)
    if isinstance(value, list) and len(value) == 1:
        return value[0]
    return value


class NoPublicCloudRunInvoker(BaseResourceCheck):
    def __init__(self) -> None:
        super().__init__(
            name="Cloud Run services and jobs are never invokable by allUsers or allAuthenticatedUsers",
            id="CKV_RUNONCE_1",
            categories=[CheckCategories.IAM],
            supported_resources=[
                "google_cloud_run_v2_service_iam_member",
                "google_cloud_run_v2_service_iam_binding",
                "google_cloud_run_service_iam_member",
                "google_cloud_run_service_iam_binding",
                "google_cloud_run_v2_job_iam_member",
                "google_cloud_run_v2_job_iam_binding",
            ],
        )

    def scan_resource_conf(self, conf: dict[str, Any]) -> CheckResult:
        members = conf.get("members", [[]])[0] if "members" in conf else [_value(conf, "member")]
        if any(isinstance(m, str) and m in PUBLIC_MEMBERS for m in members or []):
            return CheckResult.FAILED
        return CheckResult.PASSED


class SchedulerJobUsesOidc(BaseResourceCheck):
    def __init__(self) -> None:
        super().__init__(
            name="Cloud Scheduler HTTP jobs authenticate with an OIDC token of a service account",
            id="CKV_RUNONCE_2",
            categories=[CheckCategories.IAM],
            supported_resources=["google_cloud_scheduler_job"],
        )

    def scan_resource_conf(self, conf: dict[str, Any]) -> CheckResult:
        http_target = _value(conf, "http_target")
        if not http_target:
            return CheckResult.UNKNOWN  # Pub/Sub or App Engine targets: not ours to judge
        oidc = _value(http_target, "oidc_token")
        if not isinstance(oidc, dict) or not _value(oidc, "service_account_email"):
            return CheckResult.FAILED
        return CheckResult.PASSED


class CloudRunRequiresAuthentication(BaseResourceCheck):
    def __init__(self) -> None:
        super().__init__(
            name="Cloud Run services open to all ingress keep the invoker IAM check on",
            id="CKV_RUNONCE_3",
            categories=[CheckCategories.NETWORKING],
            supported_resources=["google_cloud_run_v2_service", "google_cloud_run_service"],
        )

    def scan_resource_conf(self, conf: dict[str, Any]) -> CheckResult:
        if "template" in conf and "metadata" in conf:  # v1 (knative) resource: annotations
            metadata = _value(conf, "metadata") or {}
            annotations = _value(metadata, "annotations") or {}
            ingress = annotations.get("run.googleapis.com/ingress", "all")
            iam_disabled = str(annotations.get("run.googleapis.com/invoker-iam-disabled", "false")).lower() == "true"
            open_ingress = ingress == "all"
        else:
            ingress = _value(conf, "ingress") or "INGRESS_TRAFFIC_ALL"
            iam_disabled = _value(conf, "invoker_iam_disabled") is True
            open_ingress = ingress == "INGRESS_TRAFFIC_ALL"
        if open_ingress and iam_disabled:
            return CheckResult.FAILED
        return CheckResult.PASSED


check_public_invoker = NoPublicCloudRunInvoker()
check_scheduler_oidc = SchedulerJobUsesOidc()
check_cloud_run_auth = CloudRunRequiresAuthentication()
