"""What a Google API method dedupes on: the only fields a `google_api` route may fill from the run
to make a retried call create nothing new ("handles").

A method dedupes on what its document says it does, and nothing else:

- **a client-chosen resource id** (AIP-133): the `…Id` query parameter of a create that POSTs to a
  collection (`jobId` of `batch.projects.locations.jobs.create`, path `v1/{+parent}/jobs`), or the
  same field at the top of the create's request body (`deploymentResourcePoolId`), or BigQuery's
  `<kind>Reference.<kind>Id` in an insert's body (`jobReference.jobId` of `jobs.insert`), or
  Dataproc's `<kind>Name` of a create, which its description holds unique (`clusterName`), and
  `<kind>.reference.<kind>Id` of a submit
  (`job.reference.jobId`), or the `name` of a body that is the resource itself where the description
  says the client provides or assigns it, or holds it unique (Compute Engine's `instances.insert`,
  Logging's `sinks.create`), or of the resource inside the request (GKE's `cluster.name`). A second
  create with the same id answers 409 ALREADY_EXISTS.
- **the resource's name in a create's path** (`PUT v1/{+name}`, Pub/Sub's `topics.create`), or in
  its body where the document says the caller may choose it (Cloud Tasks' `task.name`) or that a
  create with a taken one fails (Storage Transfer's `TransferJob.name`).
- **a `requestId`** the method takes (query parameter or top-level body field): the API answers a
  repeated request id with the first request's result (AIP-155); not one its description calls
  deprecated, of no effect, or for debugging only.

A field that merely ends in `Id` (`traceId` of `bigquery.tabledata.insertAll`) or merely holds
`${run_id}` dedupes nothing, and neither does a reconcile read of a name the server picks
(Workflows' `executions.create` assigns the execution's id): a lost answer then leads to a second
execution. A reconcile read counts only when the name it reads is built from the run's resource id.

The ids the run fills are held to the API's rule for them: the rule the method's description
states (`ID_RULES`, written from it; else read from it: a length, an alphabet, a requestId that "must be
a valid UUID"), else AIP-122's resource-id rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from runonce.targets.engine import dotted
from runonce.targets.google_api_discovery import ApiDocument, ApiMethod, load, vendored_names

Kind = Literal["resource id", "resource name", "request id"]


@dataclass(frozen=True)
class IdRule:
    pattern: str
    """Matched whole (`re.fullmatch`)."""
    words: str


AIP_122 = IdRule(
    r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?", "1-63 characters of a-z 0-9 -, starting with a letter, not ending with -"
)
"""A resource id where the API states no other rule (AIP-122: RFC 1034 labels)."""
UUID = IdRule(
    r"(?!00000000-0000-0000-0000-000000000000)[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "a UUID other than the zero UUID (fill it with ${run_uuid})",
)
PUBSUB_ID = IdRule(
    r"(?!goog)[A-Za-z][A-Za-z0-9._~+%-]{2,254}",
    "3-255 characters of A-Z a-z 0-9 - _ . ~ + %, starting with a letter, not with 'goog'",
)
CLOUD_RUN_ID = IdRule(
    r"[a-z](?:[a-z0-9-]{0,47}[a-z0-9])?",
    "1-49 characters of a-z 0-9 -, starting with a letter, not ending with -",
)
"""Cloud Run's ids: the length and ends its document states, in AIP-122's alphabet (it names none)."""
ENDPOINT_ID = IdRule(
    r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?|[1-9][0-9]{0,8}",
    "1-63 characters of a-z 0-9 -, starting with a letter, not ending with -; or 1-9 digits, no leading zero",
)
DATAPROC_REQUEST_ID = IdRule(r"[A-Za-z0-9_-]{1,40}", "1-40 characters of A-Z a-z 0-9 _ -")
BIGQUERY_TABLE_ID = IdRule(
    r"(?:[A-Za-z0-9_ -]|[^\x00-\x9f]){1,1024}",
    "1-1024 characters: letters, marks, numbers, connectors (_), dashes (-) and spaces (Unicode L, M, N, Pc, Pd, Zs)",
)
"""Exact in ASCII; Python's `re` has no Unicode categories, so a character past U+009F is left to BigQuery."""
ID_RULES: dict[tuple[str, str], IdRule] = {
    # (api, field) -> the rule the field's description states, where it is not AIP-122's and the
    # description's words are not read whole (google_api_discovery.described_id_rule reads the rest).
    # A field whose description states AIP-122's own rule, or none, is left out (AIP-122 applies):
    # aiplatform.v1 deploymentResourcePoolId, evaluationMetricId, memoryId, persistentResourceId,
    # semanticGovernancePolicyId, servingProfileId, notebookExecutionJobId, notebookRuntimeTemplateId;
    # file.v1 backupId, snapshotId, instanceId; run.v2 jobId; dataflow.v1b3 configStoreSettingId.
    # A requestId whose description states no rule is held to none (cloudtasks.v2).
    # "The value must contain only letters (a-z, A-Z), numbers (0-9), underscores (_), and hyphens (-).
    # The maximum length is 40 characters." (every dataproc.v1 method's requestId)
    ("dataproc.v1", "requestId"): DATAPROC_REQUEST_ID,
    # "The name must start with a lowercase letter, and can contain up to 51 lowercase letters, numbers, and
    # hyphens. It cannot end with a hyphen."
    ("dataproc.v1", "clusterName"): IdRule(
        r"[a-z](?:[a-z0-9-]{0,50}[a-z0-9])?",
        "a lower-case letter, then up to 51 characters of a-z 0-9 -, not ending with -",
    ),
    # "If the first character is a letter, this value may be up to 63 characters, and valid characters are
    # `[a-z0-9-]`. The last character must be a letter or number. If the first character is a number, this
    # value may be up to 9 characters, and valid characters are `[0-9]` with no leading zeros."
    ("aiplatform.v1", "endpointId"): ENDPOINT_ID,
    # "This value should match "a-z0-9{0, 127}"" (the markdown lost the brackets of [a-z0-9][a-z0-9-]{0,127})
    ("aiplatform.v1", "tensorboardTimeSeriesId"): IdRule(
        r"[a-z0-9][a-z0-9-]{0,127}", "1-128 characters of a-z 0-9 -, not starting with -"
    ),
    # "The ID can contain Unicode characters in category L (letter), M (mark), N (number), Pc (connector,
    # including underscore), Pd (dash), and Zs (space). ... The maximum length is 1,024 characters."
    ("bigquery.v2", "tableReference.tableId"): BIGQUERY_TABLE_ID,
    # jobs.query: "It is case-sensitive, limited to up to 36 ASCII characters. A UUID is recommended."
    ("bigquery.v2", "requestId"): IdRule(r"[\x20-\x7e]{1,36}", "1-36 printable ASCII characters (a UUID: ${run_uuid})"),
    # "must start with a letter, and contain only letters (`[A-Za-z]`), numbers (`[0-9]`), dashes (`-`),
    # underscores (`_`), periods (`.`), tildes (`~`), plus (`+`) or percent signs (`%`). It must be between
    # 3 and 255 characters in length, and it must not start with `"goog"`." (topics, subscriptions; snapshots
    # and schemaId: "See https://cloud.google.com/pubsub/docs/pubsub-basics#resource_names")
    ("pubsub.v1", "name"): PUBSUB_ID,
    ("pubsub.v1", "schemaId"): PUBSUB_ID,
    # "It must begin with letter, and cannot end with hyphen; must contain fewer than 50 characters."
    # (serviceId, instanceId, workerPoolId)
    ("run.v2", "serviceId"): CLOUD_RUN_ID,
    ("run.v2", "instanceId"): CLOUD_RUN_ID,
    ("run.v2", "workerPoolId"): CLOUD_RUN_ID,
}


@dataclass(frozen=True)
class Handle:
    """One field a method dedupes on: where it goes (`params` or `body`) and its (dotted) name."""

    kind: Kind
    where: Literal["params", "body"]
    field: str
    rule: IdRule | None = None
    """The rule its description states (a requestId that "must be a valid UUID", an id's length and
    alphabet), where `ID_RULES` has none."""

    @property
    def path(self) -> str:
        return f"{self.where}.{self.field}"

    @property
    def names_resource(self) -> bool:
        """Whether the field's value names the resource a reconcile read can find by it."""
        return self.kind != "request id"


def handles_of(document: ApiDocument, method: ApiMethod) -> list[Handle]:
    """Every field `method` dedupes on, as its document describes the method."""
    handles: list[Handle] = []
    request = _properties(document, method.request)
    collection = _collection(method)
    if collection is not None:
        for name, spec in method.parameters.items():
            if spec.get("location") == "query" and _is_resource_id(name, spec, collection):
                handles.append(Handle("resource id", "params", name, _described(spec)))
        singular = _singular(collection)
        for name, field in request.items():
            # Only the id of the resource the create makes: a create may name others it makes on the
            # way (trainingPipelines.create's `modelId` names the uploaded Model, not the pipeline).
            named_for_it = name[:-2].lower() == singular.lower()
            if name.endswith("Id") and field.get("resourceId") and not field.get("readOnly") and named_for_it:
                handles.append(Handle("resource id", "body", name, _described(field)))
            # Dataproc names a cluster by the create's `clusterName`, which its description holds unique:
            # a second create of it is refused. (A `…Name` that is text for people dedupes nothing.)
            if name == f"{singular}Name" and field.get("resourceId") and not field.get("readOnly"):
                handles.append(Handle("resource id", "body", name))
        # A create whose body is the resource itself, named by the client: by its id (Compute Engine's
        # `insert`) or by its full name (Cloud Tasks' queues.create: "Caller-specified and required").
        own_name = request.get("name") or {}
        # (the body's schema names the kind: `Queue`, or Logging's `LogSink` of `sinks`)
        if (method.request or "").lower().endswith(singular.lower()) and not own_name.get("readOnly"):
            if own_name.get("clientNamed"):
                handles.append(Handle("resource id", "body", "name", _described(own_name)))
            elif own_name.get("resourceId"):
                handles.append(Handle("resource name", "body", "name", _described(own_name)))
        resource = _properties(document, (request.get(singular) or {}).get("$ref"))
        nested_name = resource.get("name", {})
        if nested_name.get("resourceId") and not nested_name.get("readOnly"):
            handles.append(Handle("resource name", "body", f"{singular}.name", _described(nested_name)))
        elif nested_name.get("clientNamed") and not nested_name.get("readOnly"):
            # the id itself, which the create holds unique (GKE's `cluster.name`: "must be unique within
            # this project and location")
            handles.append(Handle("resource id", "body", f"{singular}.name", _described(nested_name)))
        # A job submitted with its own id (Dataproc's `job.reference.jobId`): a second submit is refused.
        own_reference = _properties(document, (resource.get("reference") or {}).get("$ref"))
        own_id = own_reference.get(f"{singular}Id")
        if own_id is not None and not own_id.get("readOnly"):
            handles.append(Handle("resource id", "body", f"{singular}.reference.{singular}Id", _described(own_id)))
        reference = _properties(document, (request.get(f"{singular}Reference") or {}).get("$ref"))
        if f"{singular}Id" in reference:
            handles.append(
                Handle(
                    "resource id", "body", f"{singular}Reference.{singular}Id", _described(reference[f"{singular}Id"])
                )
            )
    if method.id.rsplit(".", 1)[-1] == "create" and re.search(r"\{\+?name\}$", method.path):
        handles.append(Handle("resource name", "params", "name"))
    query_request_id = method.parameters.get("requestId", {})
    if query_request_id.get("location") == "query" and not query_request_id.get("noEffect"):
        handles.append(Handle("request id", "params", "requestId", UUID if query_request_id.get("uuid") else None))
    body_request_id = request.get("requestId", {})
    if body_request_id and not body_request_id.get("readOnly") and not body_request_id.get("noEffect"):
        handles.append(Handle("request id", "body", "requestId", UUID if body_request_id.get("uuid") else None))
    return handles


def _described(spec: dict[str, Any]) -> IdRule | None:
    """The id rule the field's description states (`described_id_rule`), if it states one."""
    rule = spec.get("idRule")
    return IdRule(rule["pattern"], rule["words"]) if rule else None


def _properties(document: ApiDocument, schema_name: str | None) -> dict[str, Any]:
    if not schema_name or schema_name not in document.schemas:
        return {}
    return dict(document.resolve({"$ref": schema_name}).get("properties") or {})


def _collection(method: ApiMethod) -> str | None:
    """The collection a create POSTs to (`jobs` of `v1/{+parent}/jobs`, or of Dataproc's
    `…/jobs:submit`), or None when the method is no such create (its id ends in `create`, BigQuery's
    `insert`, or Dataproc's `submit` and `submitAsOperation`; or it is `create<Kind>` of a collection the
    route names)."""
    verb = method.id.rsplit(".", 1)[-1]
    last = method.path.rstrip("/").rsplit("/", 1)[-1].removesuffix(f":{verb}")
    kind = re.fullmatch(r"create([A-Z][A-Za-z0-9]*)", verb)
    if method.http_method == "POST" and kind and re.fullmatch(r"\{\w+\}", last):
        # Firestore's `documents.createDocument` POSTs to `v1/{+parent}/{collectionId}`: a collection
        # the route names, of the kind the verb says
        return kind.group(1)[0].lower() + kind.group(1)[1:] + "s"
    if method.http_method != "POST" or verb not in ("create", "insert", "submit", "submitAsOperation"):
        return None
    return last if re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", last) else None


def _singular(collection: str) -> str:
    for plural, singular in (("ies", "y"), ("ches", "ch"), ("sses", "ss"), ("s", "")):
        if collection.endswith(plural):
            return collection[: -len(plural)] + singular
    return collection


def _is_resource_id(name: str, spec: dict[str, Any], collection: str) -> bool:
    """`jobId` for `…/jobs`: named for the collection's resource, or described as its id."""
    if not name.endswith("Id") or name == "requestId":
        return False
    return bool(spec.get("resourceId")) or name[:-2].lower() == _singular(collection).lower()


# --- a route's fields ------------------------------------------------------------------------------


def value_at(params: dict[str, Any], body: dict[str, Any] | None, handle: Handle) -> Any:
    """The route's value for `handle` (None when the route leaves it out)."""
    return dotted(params if handle.where == "params" else body, handle.field)


def id_rule(api: str, handle: Handle) -> IdRule | None:
    """The rule the run-filled value of `handle` is held to (for a name: its last segment)."""
    rule = ID_RULES.get((api, handle.field)) or handle.rule
    if rule is not None or handle.kind == "request id":
        return rule  # a requestId's rule is the API's own or none: AIP-155 names no alphabet
    return AIP_122


def id_problem(api: str, handle: Handle, value: str) -> str | None:
    """What the API's id rule says against `value` (one expansion of the route's field), or None."""
    rule = id_rule(api, handle)
    if rule is None:
        return None
    resource_id = value.rsplit("/", 1)[-1] if handle.kind == "resource name" else value
    if re.fullmatch(rule.pattern, resource_id):
        return None
    part = f"the id {resource_id!r} in {value!r}" if resource_id != value else repr(value)
    return f"{handle.path}: {part} is not an id {api} takes: {rule.words}"


def describe(handles: list[Handle]) -> str:
    """`params.jobId (resource id), params.requestId (request id)`, or that there are none."""
    return ", ".join(f"{handle.path} ({handle.kind})" for handle in handles)


def handles_by_api() -> dict[str, dict[str, list[Handle]]]:
    """The handles of every method of the documents runonce carries (for the docs), by API and method."""
    table: dict[str, dict[str, list[Handle]]] = {}
    for api in vendored_names():
        document = load(api)
        methods = {}
        for method_id in document.method_ids():
            method = document.method(method_id)
            assert method is not None  # listed by the document itself
            found = handles_of(document, method)
            if found:
                methods[method_id.removeprefix(f"{document.name}.")] = found
        table[api] = methods
    return table


def handles_table() -> str:
    """The Markdown table of `handles_by_api` that docs/how-to/targets/google_api.md carries."""
    lines = ["| API | method | what it dedupes on |", "|---|---|---|"]
    for api, methods in handles_by_api().items():
        if not methods:
            lines.append(f"| `{api}` | (none: no method takes a client-chosen id or a requestId) | |")
        for method, handles in methods.items():
            lines.append(f"| `{api}` | `{method}` | {', '.join(f'`{handle.path}`' for handle in handles)} |")
    return "\n".join(lines) + "\n"
