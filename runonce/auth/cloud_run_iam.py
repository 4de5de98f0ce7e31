"""`RUNONCE_AUTH=cloud_run_iam`'s start-up check: is Cloud Run's invoker check really guarding us?

In that mode runonce trusts the caller's email in a token whose signature Cloud Run removed
(`SIGNATURE_REMOVED_BY_GOOGLE`), because Cloud Run's invoker check verified it. That is safe only
while the check is on and nobody public may invoke the service. So before serving, runonce reads
its own service and that service's IAM policy (Cloud Run Admin API v2, `services.get` and
`services.getIamPolicy`: the runtime account needs exactly `run.services.get` and
`run.services.getIamPolicy` on the service) and refuses to start, with one line, if
`invokerIamDisabled` is true or `allUsers` / `allAuthenticatedUsers` holds a role on it.

Which service: `K_SERVICE` (set by Cloud Run), in the project and region the metadata server
names; the access token comes from the metadata server too. Plain httpx, synchronous: it runs once,
before the app exists.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from runonce.settings import ConfigError, Settings
from runonce.tls import client_context

PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")
TIMEOUT_SECONDS = 10.0


def check_invoker_iam(settings: Settings, environ: Mapping[str, str] = os.environ) -> None:
    """Return if Cloud Run's invoker check guards this service; raise `ConfigError` (one line) if not,
    or if it cannot be read."""
    service = environ.get("K_SERVICE")
    if not service:
        raise ConfigError(
            "RUNONCE_AUTH=cloud_run_iam trusts Cloud Run's invoker check, so it runs only on Cloud Run "
            "(K_SERVICE is not set); use RUNONCE_AUTH=oidc elsewhere"
        )
    host = environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
    base = (settings.run_endpoint or "https://run.googleapis.com").rstrip("/")
    try:
        with httpx.Client(timeout=TIMEOUT_SECONDS, verify=client_context()) as http:
            metadata = _metadata_reader(http, host)
            project = metadata("project/project-id")
            region = metadata("instance/region").rsplit("/", 1)[-1]  # projects/NUMBER/regions/REGION
            token = json.loads(metadata("instance/service-accounts/default/token"))["access_token"]
            name = f"projects/{project}/locations/{region}/services/{service}"
            headers = {"Authorization": f"Bearer {token}"}
            found = _read(http, f"{base}/v2/{name}", headers, name, "run.services.get")
            policy = _read(http, f"{base}/v2/{name}:getIamPolicy", headers, name, "run.services.getIamPolicy")
    except httpx.HTTPError as exc:
        raise ConfigError(
            f"RUNONCE_AUTH=cloud_run_iam: cannot check the service's invoker IAM ({exc}); retry, "
            "or use RUNONCE_AUTH=oidc"
        ) from None
    if found.get("invokerIamDisabled") is True:
        raise ConfigError(
            f"RUNONCE_AUTH=cloud_run_iam refused: service {name} has the invoker IAM check off "
            "(invokerIamDisabled), so Cloud Run verifies no token and anyone could pose as any caller; "
            f"turn it on (gcloud run services update {service} --invoker-iam-check) or use RUNONCE_AUTH=oidc"
        )
    for binding in policy.get("bindings", []):
        public = [member for member in binding.get("members", []) if member in PUBLIC_MEMBERS]
        if public:
            raise ConfigError(
                f"RUNONCE_AUTH=cloud_run_iam refused: {public[0]} holds {binding.get('role')} on service {name}, "
                "so anyone can get through Cloud Run's invoker check and pose as any caller; remove that binding "
                "or use RUNONCE_AUTH=oidc"
            )


def _metadata_reader(http: httpx.Client, host: str) -> Callable[[str], str]:
    def read(path: str) -> str:
        response = http.get(f"http://{host}/computeMetadata/v1/{path}", headers={"Metadata-Flavor": "Google"})
        response.raise_for_status()
        return response.text

    return read


def _read(http: httpx.Client, url: str, headers: dict[str, str], name: str, permission: str) -> dict[str, Any]:
    response = http.get(url, headers=headers)
    if response.status_code in (401, 403, 404):
        raise ConfigError(
            f"RUNONCE_AUTH=cloud_run_iam: cannot read service {name} (HTTP {response.status_code}); grant the "
            f"runtime account {permission} on it (deploy-service.sh --auth cloud_run_iam, or Terraform auth = "
            '"cloud_run_iam", grants run.services.get and run.services.getIamPolicy)'
        )
    response.raise_for_status()
    document: dict[str, Any] = response.json()
    return document
