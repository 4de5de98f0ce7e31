"""A fake of the Google Cloud APIs the deploy/ scripts call through gcloud, at the network edge.

gcloud reaches it through endpoint overrides (`http://<api>.fake.invalid/`) and an HTTP proxy
setting that sends every request here (gcloud prefixes the region onto Cloud Run's host, so only a
proxy catches them all). Each request is matched against the method list of Google's discovery
document for that API (shipped in google-api-python-client's wheel) and its JSON body checked
against the request schema: an unknown path, field or wrongly typed value is answered 400 and
recorded in `violations`. Resources are kept in memory, so describe-after-create and IAM
read-modify-write behave as on the real APIs, and a second run of a script sees what the first made.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

from tests.support import oidc
from tests.support.discovery import Discovery, Violation

DOCUMENTS = {  # API host -> its discovery document
    "cloudscheduler": "cloudscheduler.v1",
    "cloudresourcemanager": "cloudresourcemanager.v1",
    "iam": "iam.v1",
    "firestore": "firestore.v1",
    "run": "run.v1",
    "serviceusage": "serviceusage.v1",
    "artifactregistry": "artifactregistry.v1",
    "iamcredentials": "iamcredentials.v1",
    "spanner": "spanner.v1",
    "cloudtasks": "cloudtasks.v2",
    "logging": "logging.v2",
    "monitoring": "monitoring.v3",
    "monitoring/v1": "monitoring.v1",  # the same host: dashboards are Monitoring's v1, alert policies its v3
}
# Scheduler's answer for the next fire time of any job here (output-only `scheduleTime`): what a
# forced run carries as X-CloudScheduler-ScheduleTime.
NEXT_SCHEDULE_TIME = "2027-01-01T00:00:00Z"
# HTTP status of a target's answer -> the gRPC code Scheduler puts in the job's `status`.
GRPC_CODE = {400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 429: 8, 500: 13, 502: 14, 503: 14, 504: 4}
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
READ_ONLY_POSTS = (":getIamPolicy",)


@dataclass
class Captured:
    host: str
    api: str
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    method_id: str

    @property
    def mutating(self) -> bool:
        return self.method in MUTATING and not self.path.endswith(READ_ONLY_POSTS)


class NotFound(Exception):
    pass


class PermissionDenied(Exception):
    pass


TOKEN_CREATOR_ROLES = ("roles/iam.serviceAccountOpenIdTokenCreator", "roles/iam.serviceAccountTokenCreator")


@dataclass
class State:
    project_id: str
    project_number: str
    service_accounts: dict[str, dict] = field(default_factory=dict)
    policies: dict[str, dict] = field(default_factory=dict)  # resource key -> IAM policy
    databases: dict[str, dict] = field(default_factory=dict)
    fields: dict[str, dict] = field(default_factory=dict)
    services: dict[str, dict] = field(default_factory=dict)
    jobs: dict[str, dict] = field(default_factory=dict)
    roles: dict[str, dict] = field(default_factory=dict)  # projects/P/roles/ID -> Role
    images: dict[str, str] = field(default_factory=dict)  # REGION-docker.pkg.dev/P/REPO/IMAGE:TAG -> sha256:...
    log_metrics: dict[str, dict] = field(default_factory=dict)  # projects/P/metrics/NAME -> LogMetric
    alert_policies: dict[str, dict] = field(default_factory=dict)  # projects/P/alertPolicies/ID -> AlertPolicy
    dashboards: dict[str, dict] = field(default_factory=dict)  # projects/P/dashboards/ID -> Dashboard


class FakeGoogle:
    def __init__(self, project_id: str = "demo-project", project_number: str = "123456789012"):
        self.state = State(project_id, project_number)
        self.key = oidc.make_key("fake-google-key")  # signs the OIDC tokens Scheduler and iamcredentials mint
        self.requests: list[Captured] = []
        self.violations: list[str] = []
        # The member gcloud's access token belongs to: when set, minting a service account's ID
        # token needs a token-creator grant to it on that account, as on Google.
        self.caller: str | None = None
        # Where a delivery to a service URL goes instead (https://…run.app -> a local runonce).
        self.backends: dict[str, str] = {}
        self.discovery = {api: Discovery(name) for api, name in DOCUMENTS.items()}
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                fake._serve(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGoogle:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def push_image(self, image: str, tag: str, digest: str) -> None:
        """An image in the fake Artifact Registry: `REGION-docker.pkg.dev/P/REPO/IMAGE`, a tag, `sha256:...`."""
        self.state.images[f"{image}:{tag}"] = digest

    def mutations(self) -> list[Captured]:
        return [r for r in self.requests if r.mutating]

    def find(self, method_id: str) -> list[Captured]:
        return [r for r in self.requests if r.method_id == method_id]

    # --- transport ------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path if "://" in handler.path else f"http://{handler.headers['Host']}{handler.path}")
        host = url.hostname or ""
        api = host.split(".")[0]
        api = re.sub(r"^[a-z]+-[a-z]+\d+-", "", api)  # europe-west1-run -> run
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        path = unquote(url.path.lstrip("/"))
        query = parse_qs(url.query)
        status, payload = 500, {}
        try:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                raise Violation(f"{handler.command} {path}: body is not JSON") from None
            discovery = self.discovery.get(f"{api}/v1" if api == "monitoring" and path.startswith("v1/") else api)
            if discovery is None:
                raise Violation(f"request to unknown API host {host!r}")
            method_id, _ = discovery.match(handler.command, path, query, body if body is not None else {})
            with self._lock:
                self.requests.append(Captured(host, api, handler.command, path, query, body, method_id))
                status, payload = 200, self._dispatch(method_id, path, query, body, host)
        except Violation as exc:
            self.violations.append(str(exc))
            status, payload = 400, _error(400, "INVALID_ARGUMENT", str(exc))
        except NotFound as exc:
            status, payload = 404, _error(404, "NOT_FOUND", str(exc))
        except PermissionDenied as exc:
            status, payload = 403, _error(403, "PERMISSION_DENIED", str(exc))
        except Exception as exc:  # noqa: BLE001 - the fake could not handle it: fail the test, answer like Google would
            self.violations.append(f"{handler.command} {path}: the fake failed on this request: {exc!r}")
            status, payload = 500, _error(500, "INTERNAL", repr(exc))
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=UTF-8")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    # --- the APIs ---------------------------------------------------------------------------

    def _dispatch(self, method_id: str, path: str, query: dict, body: Any, host: str) -> Any:
        s = self.state
        parts = path.split("/")
        rel = path.split("/", 1)[1] if path.startswith("v1/") else path  # resource name, without the version
        rparts = rel.split("/")
        if method_id == "cloudresourcemanager.projects.get":
            if rparts[1] != s.project_id:
                raise NotFound(f"project {rparts[1]}")
            return {
                "projectId": s.project_id,
                "projectNumber": s.project_number,
                "lifecycleState": "ACTIVE",
                "name": s.project_id,
            }
        if method_id == "serviceusage.services.get":
            # Container Analysis off: `artifacts docker images describe` then reads only the tag.
            state = "DISABLED" if parts[-1] == "containeranalysis.googleapis.com" else "ENABLED"
            return {"name": f"projects/{s.project_number}/services/{parts[-1]}", "state": state}

        if method_id == "artifactregistry.projects.locations.repositories.get":
            return {"name": rel, "format": "DOCKER", "mode": "STANDARD_REPOSITORY"}
        if method_id == "artifactregistry.projects.locations.repositories.packages.tags.get":
            _, project, _, location, _, repository, _, package, _, tag = rparts
            digest = s.images.get(f"{location}-docker.pkg.dev/{project}/{repository}/{unquote(package)}:{tag}")
            if digest is None:
                raise NotFound(rel)
            return {"name": rel, "version": f"{rel.split('/tags/')[0]}/versions/{digest}"}

        if method_id == "iam.projects.roles.get":
            if rel not in s.roles:
                raise NotFound(rel)
            return s.roles[rel]
        if method_id == "iam.projects.roles.create":
            name = f"{rel}/{body['roleId']}"
            s.roles[name] = {**body["role"], "name": name, "etag": "BwY="}
            return s.roles[name]
        if method_id == "iam.projects.roles.patch":
            return _patch(s.roles, rel, body, query)
        if method_id.endswith(".getIamPolicy"):
            return copy.deepcopy(self._policy(path))
        if method_id.endswith(".setIamPolicy"):
            policy = copy.deepcopy(body["policy"])
            policy["etag"] = base64.b64encode(uuid.uuid4().bytes[:8]).decode()
            self.state.policies[_policy_key(path)] = policy
            return copy.deepcopy(policy)

        if method_id == "iam.projects.serviceAccounts.get":
            if rparts[3] not in s.service_accounts:
                raise NotFound(f"service account {rparts[3]}")
            return s.service_accounts[rparts[3]]
        if method_id == "iam.projects.serviceAccounts.create":
            email = f"{body['accountId']}@{rparts[1]}.iam.gserviceaccount.com"
            account = {
                "name": f"projects/{rparts[1]}/serviceAccounts/{email}",
                "projectId": rparts[1],
                "email": email,
                "uniqueId": str(uuid.uuid4().int)[:21],
                **body.get("serviceAccount", {}),
            }
            s.service_accounts[email] = account
            return account

        if method_id == "firestore.projects.databases.get":
            if rel not in s.databases:
                raise NotFound(rel)
            return s.databases[rel]
        if method_id == "firestore.projects.databases.create":
            name = f"{rel}/{query['databaseId'][0]}"
            s.databases[name] = {**body, "name": name}
            return {"name": f"{name}/operations/{uuid.uuid4().hex}", "done": True, "response": s.databases[name]}
        if method_id == "firestore.projects.databases.collectionGroups.fields.list":
            group = rparts[5]
            return {
                "fields": [
                    f
                    for name, f in s.fields.items()
                    if (group == "-" or f"/collectionGroups/{group}/" in name) and "ttlConfig" in f
                ]
            }
        if method_id == "firestore.projects.databases.collectionGroups.fields.get":
            return s.fields.get(rel, {"name": rel, "indexConfig": {"usesAncestorConfig": True}})
        if method_id == "firestore.projects.databases.collectionGroups.fields.patch":
            if body.get("name", rel) != rel:
                raise Violation(f"field name {body['name']!r} differs from the path {rel!r}")
            s.fields[rel] = {**s.fields.get(rel, {}), **body, "name": rel}
            if "ttlConfig" in body:
                s.fields[rel]["ttlConfig"] = {"state": "ACTIVE"}
            database = "/".join(rel.split("/")[:4])
            return {"name": f"{database}/operations/{uuid.uuid4().hex}", "done": True, "response": s.fields[rel]}
        if method_id == "firestore.projects.databases.operations.get":
            return {"name": rel, "done": True}

        if method_id in ("run.namespaces.services.get", "run.projects.locations.services.get"):
            name = parts[-1]
            if name not in s.services:
                raise NotFound(f"service {name}")
            return s.services[name]
        if method_id in ("run.namespaces.services.create", "run.namespaces.services.replaceService"):
            return self._deploy_service(body, region=host.split("-run.")[0])

        if method_id == "cloudscheduler.projects.locations.jobs.get":
            if rel not in s.jobs:
                raise NotFound(rel)
            return s.jobs[rel]
        if method_id == "cloudscheduler.projects.locations.jobs.create":
            name = body["name"]
            if not name.startswith(rel + "/"):
                raise Violation(f"job name {name!r} is not under {rel}")
            s.jobs[name] = {
                **body,
                "state": "ENABLED",
                "userUpdateTime": "2026-11-30T00:00:00Z",
                "scheduleTime": NEXT_SCHEDULE_TIME,
            }
            return s.jobs[name]
        if method_id == "cloudscheduler.projects.locations.jobs.delete":
            if s.jobs.pop(rel.removesuffix(":delete"), None) is None:
                raise NotFound(rel)
            return {}
        if method_id == "cloudscheduler.projects.locations.jobs.run":
            name = rel.removesuffix(":run")
            if name not in s.jobs:
                raise NotFound(name)
            self._deliver(s.jobs[name])
            return s.jobs[name]
        if method_id == "iamcredentials.projects.serviceAccounts.generateAccessToken":
            return {"accessToken": f"ya29.impersonated-{uuid.uuid4().hex[:8]}", "expireTime": "2099-01-01T00:00:00Z"}
        if method_id == "iamcredentials.projects.serviceAccounts.generateIdToken":
            email = rparts[3].removesuffix(":generateIdToken")
            self._check_token_creator(email)
            claims = oidc.claims(audience=body["audience"], email=email if body.get("includeEmail") else None)
            return {"token": oidc.sign(self.key, claims)}
        if method_id == "cloudscheduler.projects.locations.jobs.patch":
            return _patch(s.jobs, rel, body, query)
        if method_id.startswith(("logging.projects.metrics.", "monitoring.projects.alertPolicies.")):
            return self._monitoring(method_id, path.split("/", 1)[1], query, body)
        if method_id.startswith("monitoring.projects.dashboards."):
            return self._dashboards(method_id, rel, body)
        raise Violation(f"{method_id}: valid, but this fake does not implement it")

    def _monitoring(self, method_id: str, rel: str, query: dict, body: Any) -> Any:
        """Log-based metrics (Logging v2) and alert policies (Monitoring v3), kept as the API
        returns them: with the fields the server adds, so a second run compares against those.
        Not a metric's createTime/updateTime: `gcloud logging metrics update` sends the metric it
        read back, which Google accepts (it ignores output-only fields) but the checker would not."""
        s = self.state
        rel = unquote(rel)  # gcloud sends a metric's '/' as %252F: the path carries %2F once decoded
        if method_id == "logging.projects.metrics.list":
            found = [m for name, m in s.log_metrics.items() if name.startswith(rel + "/")]
            return {"metrics": found} if found else {}
        if method_id == "logging.projects.metrics.get":
            if rel not in s.log_metrics:
                raise NotFound(rel)
            return s.log_metrics[rel]
        if method_id in ("logging.projects.metrics.create", "logging.projects.metrics.update"):
            name = f"{rel}/{body['name']}" if method_id.endswith("create") else rel
            if method_id.endswith("update") and name not in s.log_metrics:
                raise NotFound(name)
            if name.removeprefix(f"projects/{s.project_id}/metrics/") != body["name"]:
                raise Violation(f"metric name {body['name']!r} differs from the path {name!r}")
            metric = copy.deepcopy(body)
            metric.setdefault("metricDescriptor", {}).update(
                name=f"projects/{s.project_id}/metricDescriptors/logging.googleapis.com/user/{body['name']}",
                type=f"logging.googleapis.com/user/{body['name']}",
            )
            s.log_metrics[name] = metric
            return metric
        if method_id == "monitoring.projects.alertPolicies.list":
            wanted = query.get("filter", [""])[0]
            match = re.fullmatch(r'displayName\s*=\s*"([^"]*)"', wanted) if wanted else None
            if wanted and match is None:
                raise Violation(f'this fake filters alert policies by displayName="..." only, got {wanted!r}')
            found = [
                p
                for name, p in s.alert_policies.items()
                if name.startswith(rel + "/") and (match is None or p["displayName"] == match.group(1))
            ]
            return {"alertPolicies": found, "totalSize": len(found)} if found else {}
        if method_id == "monitoring.projects.alertPolicies.create":
            name = f"{rel}/{uuid.uuid4().int % 10**19}"  # rel: projects/P/alertPolicies
            policy = {**copy.deepcopy(body), "name": name, "creationRecord": {"mutateTime": "2026-11-30T00:00:00Z"}}
            for condition in policy.get("conditions", []):
                condition["name"] = f"{name}/conditions/{uuid.uuid4().int % 10**19}"
            s.alert_policies[name] = policy
            return policy
        if method_id == "monitoring.projects.alertPolicies.patch":
            if rel not in s.alert_policies:
                raise NotFound(rel)
            if query.get("updateMask"):
                return _patch(s.alert_policies, rel, body, query)
            s.alert_policies[rel] = {
                **copy.deepcopy(body),
                "name": rel,
                "creationRecord": s.alert_policies[rel]["creationRecord"],
            }
            return s.alert_policies[rel]
        raise Violation(f"{method_id}: valid, but this fake does not implement it")

    def _dashboards(self, method_id: str, rel: str, body: Any) -> Any:
        """Dashboards (Monitoring v1): generated IDs and an etag that an update must name."""
        s = self.state
        if method_id == "monitoring.projects.dashboards.list":
            found = [d for name, d in s.dashboards.items() if name.startswith(rel + "/")]
            return {"dashboards": found} if found else {}
        if method_id == "monitoring.projects.dashboards.get":
            if rel not in s.dashboards:
                raise NotFound(rel)
            return s.dashboards[rel]
        if method_id == "monitoring.projects.dashboards.create":
            name = f"{rel}/{uuid.uuid4().hex[:12]}"  # rel: projects/P/dashboards
            s.dashboards[name] = {**copy.deepcopy(body), "name": name, "etag": uuid.uuid4().hex}
            return s.dashboards[name]
        if method_id == "monitoring.projects.dashboards.patch":
            if rel not in s.dashboards:
                raise NotFound(rel)
            if body.get("etag") != s.dashboards[rel]["etag"]:
                raise Violation(f"{rel}: an update must carry the etag of the dashboard it replaces")
            s.dashboards[rel] = {**copy.deepcopy(body), "name": rel, "etag": uuid.uuid4().hex}
            return s.dashboards[rel]
        raise Violation(f"{method_id}: valid, but this fake does not implement it")

    def _deliver(self, job: dict) -> None:
        """A forced run, as Cloud Scheduler makes it: the job's request with a fresh OIDC token,
        X-CloudScheduler-* headers and the next schedule time; the answer goes into the job's
        `lastAttemptTime` and `status`. Synchronous, so the attempt is recorded when `run` returns."""
        target = job["httpTarget"]
        token = target["oidcToken"]
        headers = {
            **target.get("headers", {}),
            "Authorization": "Bearer "
            + oidc.sign(
                self.key,
                oidc.claims(audience=token.get("audience") or target["uri"], email=token["serviceAccountEmail"]),
            ),
            "X-CloudScheduler-JobName": job["name"].rsplit("/", 1)[-1],
            "X-CloudScheduler-ScheduleTime": job["scheduleTime"],
            "User-Agent": "Google-Cloud-Scheduler",
        }
        uri = target["uri"]
        for url, backend in self.backends.items():
            if uri.startswith(url + "/"):
                uri = backend + uri.removeprefix(url)
        try:
            answer = httpx.request(
                target.get("httpMethod", "POST"),
                uri,
                headers=headers,
                content=base64.b64decode(target.get("body", "")),
                timeout=60,
            )
            code = 0 if answer.is_success else GRPC_CODE.get(answer.status_code, 2)
        except httpx.HTTPError:
            code = 14
        job["lastAttemptTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        job["status"] = {"code": code} if code else {}

    def _check_token_creator(self, email: str) -> None:
        if self.caller is None:
            return
        policy = self.state.policies.get(f"v1/projects/-/serviceAccounts/{email}", {})
        granted = {
            member for b in policy.get("bindings", []) if b["role"] in TOKEN_CREATOR_ROLES for member in b["members"]
        }
        if self.caller not in granted:
            raise PermissionDenied(
                f"Permission 'iam.serviceAccounts.getOpenIdToken' denied on resource {email} for {self.caller}"
            )

    def _policy(self, path: str) -> dict:
        return self.state.policies.setdefault(_policy_key(path), {"version": 1, "etag": "ACAB", "bindings": []})

    def _deploy_service(self, body: dict, region: str) -> dict:
        service = copy.deepcopy(body)
        name = service["metadata"]["name"]
        previous = self.state.services.get(name)
        generation = (previous["metadata"]["generation"] + 1) if previous else 1
        revision = f"{name}-{generation:05d}-abc"
        service["metadata"].update(
            {"generation": generation, "uid": str(uuid.uuid4()), "namespace": self.state.project_number}
        )
        service["status"] = {
            "observedGeneration": generation,
            "conditions": [{"type": t, "status": "True"} for t in ("Ready", "ConfigurationsReady", "RoutesReady")],
            "latestCreatedRevisionName": revision,
            "latestReadyRevisionName": revision,
            "url": f"https://{name}-{self.state.project_number}.{region}.run.app",
            "address": {"url": f"https://{name}-{self.state.project_number}.{region}.run.app"},
            "traffic": [{"revisionName": revision, "percent": 100, "latestRevision": True}],
        }
        self.state.services[name] = service
        return service


def _policy_key(path: str) -> str:
    """The resource a policy belongs to. A service account is the same resource whichever project
    the path names (`projects/-/serviceAccounts/EMAIL` is how the API spells "any")."""
    resource = path.split(":")[0]
    return re.sub(r"^v1/projects/[^/]+/serviceAccounts/", "v1/projects/-/serviceAccounts/", resource)


def _error(code: int, status: str, message: str) -> dict:
    return {"error": {"code": code, "status": status, "message": message}}


def _camel(path: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), path.strip())


def _patch(resources: dict[str, dict], name: str, body: dict, query: dict) -> dict:
    """A `patch` with an `updateMask`: the masked fields of `body` replace the stored resource's."""
    if name not in resources:
        raise NotFound(name)
    for mask in query.get("updateMask", [""])[0].split(","):
        _apply_mask(resources[name], body, _camel(mask))
    return resources[name]


def _apply_mask(target: dict, source: dict, path: str) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        source = source.get(key, {}) if isinstance(source, dict) else {}
        target = target.setdefault(key, {})
    if keys[-1] in source:
        target[keys[-1]] = copy.deepcopy(source[keys[-1]])
    else:
        target.pop(keys[-1], None)
