"""The discovery documents behind `google_api` routes, on their own: what reducing a document keeps
and fills in, the one-line problem a request field gets when it does not fit its schema (or none
when it does), and the methods suggested for a method id the document does not have. Checked
against the documents runonce carries; reduction against small documents written here, since the
carried ones are already reduced."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from runonce.targets import google_api_discovery as discovery
from tests.support import oneofs_vendor

# --- reduction ------------------------------------------------------------------------------------


def test_a_document_without_service_path_schemas_or_parameters_reduces_to_empty_defaults() -> None:
    """Documents from the client cache may leave these out; the reduced document still has them,
    and an endpoint without a URL is not taken as a locational host."""
    raw = {
        "name": "demo",
        "version": "v1",
        "rootUrl": "https://demo.googleapis.com/",
        "endpoints": [
            {"location": "us-east1", "endpointUrl": "https://us-east1-demo.googleapis.com/"},
            {"location": "europe-west1"},
            {"location": "asia-east1", "endpointUrl": "https://demo.asia-east1.rep.googleapis.com/"},
        ],
        "resources": {
            "things": {"methods": {"ping": {"id": "demo.things.ping", "httpMethod": "POST", "path": "v1/ping"}}}
        },
    }
    assert discovery.reduce_document(raw) == {
        "name": "demo",
        "version": "v1",
        "rootUrl": "https://demo.googleapis.com/",
        "servicePath": "",
        "locational": {"us-east1": "https://us-east1-demo.googleapis.com/"},
        "methods": {
            "demo.things.ping": {
                "httpMethod": "POST",
                "path": "v1/ping",
                "parameters": {},
                "request": None,
                "response": None,
            }
        },
        "schemas": {},
    }


def test_a_field_whose_description_opens_with_output_only_is_kept_as_read_only() -> None:
    """Leading blanks before "Output only" do not matter; the words elsewhere in the text do not count."""
    raw = {
        "name": "demo",
        "version": "v1",
        "rootUrl": "https://demo.googleapis.com/",
        "schemas": {
            "Thing": {
                "type": "object",
                "properties": {
                    "createTime": {"type": "string", "description": "  Output only. When the thing was made."},
                    "note": {"type": "string", "description": "Free text. Output only in listings."},
                },
            }
        },
    }
    properties = discovery.reduce_document(raw)["schemas"]["Thing"]["properties"]
    assert properties == {"createTime": {"type": "string", "readOnly": True}, "note": {"type": "string"}}


# --- request fields -------------------------------------------------------------------------------


RUNNABLES = [{"script": {"text": "echo"}}]
TASK_SPEC = {"runnables": RUNNABLES}


def _problem(api: str, value: Any, schema_name: str) -> str | None:
    return discovery.load(api).value_problem(value, {"$ref": schema_name}, "body")


@pytest.mark.parametrize(
    ("api", "value", "schema_name"),
    [
        ("batch.v1", {"instanceId": 18446744073709551615}, "AgentMetadata"),  # uint64 as a number
        ("batch.v1", {"instanceId": "18446744073709551615"}, "AgentMetadata"),  # uint64 as digits
        ("batch.v1", {"maxRetryCount": 3, "runnables": RUNNABLES}, "TaskSpec"),  # int32
        ("batch.v1", {"code": "2147483647"}, "Status"),  # int32 as digits
        ("batch.v1", {"permissiveSsh": True, "runAsNonRoot": False, "taskSpec": TASK_SPEC}, "TaskGroup"),  # booleans
        # null is "absent" for a scalar, even an output-only one
        ("batch.v1", {"uid": None, "priority": "10", "taskGroups": [{"taskSpec": TASK_SPEC}]}, "Job"),
        ("batch.v1", {"maxRunDuration": "0.000000001s", "runnables": RUNNABLES}, "TaskSpec"),
        # identifiers marked Required. may come from the path (triggers.run names the trigger there),
        # and a trigger's run builds the trigger's own repository
        ("cloudbuild.v1", {"source": {"substitutions": {"_DAY": "x"}}}, "RunBuildTriggerRequest"),
        ("batch.v1", {"maxRunDuration": "-315576000000s", "runnables": RUNNABLES}, "TaskSpec"),
        # "@type" in an open object is the packed message's type URL, whatever the other values are
        (
            "aiplatform.v1",
            {"trafficSplit": {"@type": "type.googleapis.com/x", "0": 100}, "deployedModel": {"model": "m"}},
            "GoogleCloudAiplatformV1DeployModelRequest",
        ),
    ],
)
def test_request_fields_that_fit_their_schema_have_no_problem(api: str, value: Any, schema_name: str) -> None:
    assert _problem(api, value, schema_name) is None


@pytest.mark.parametrize(
    ("api", "value", "schema_name", "problem"),
    [
        (
            "batch.v1",
            {"priority": "high"},
            "Job",
            'body.priority: expected an int64 (an integer, or a string of digits), got str "high"',
        ),
        (
            "batch.v1",
            {"destination": "STDOUT"},
            "LogsPolicy",
            "body.destination: 'STDOUT' is not one of DESTINATION_UNSPECIFIED, CLOUD_LOGGING, PATH",
        ),
        (  # proto3's JSON parsers take an enum's number too, but the document names no numbers
            "batch.v1",
            {"destination": 1},
            "LogsPolicy",
            "body.destination: expected one of DESTINATION_UNSPECIFIED, CLOUD_LOGGING, PATH (an enum value by its "
            "name), got int 1",
        ),
        ("batch.v1", {"maxRetryCount": 2.5}, "TaskSpec", "body.maxRetryCount: expected an integer, got float 2.5"),
        ("batch.v1", {"permissiveSsh": "yes"}, "TaskGroup", 'body.permissiveSsh: expected a boolean, got str "yes"'),
        (
            "bigquery.v2",
            {"configuration": {"query": {"useLegacySql": False}}},
            "Job",
            "body.configuration.query.query: required by JobConfigurationQuery "
            "(the API refuses the request without it)",
        ),
        # a null scalar is skipped, and the fields after it are still checked
        (
            "batch.v1",
            {"priority": None, "lables": {}},
            "Job",
            "body: Job has no field 'lables' (it has: allocationPolicy, labels, logsPolicy, notifications, priority, "
            "taskGroups; did you mean 'labels'?)",
        ),
        # a message without fields says so
        ("batch.v1", {"force": True}, "Empty", "body: Empty has no field 'force' (it has: none)"),
        # an object declared in place (not a named schema) is called "object"
        (
            "bigquery.v2",
            {"range": {"step": "1"}},
            "RangePartitioning",
            "body.range: object has no field 'step' (it has: end, interval, start)",
        ),
        (
            "aiplatform.v1",
            {"trafficSplit": {"0": "all"}},
            "GoogleCloudAiplatformV1DeployModelRequest",
            'body.trafficSplit.0: expected an integer, got str "all"',
        ),
    ],
)
def test_request_fields_that_do_not_fit_say_where_and_what_the_document_allows(
    api: str, value: Any, schema_name: str, problem: str
) -> None:
    assert _problem(api, value, schema_name) == problem


def test_a_value_is_shown_whole_up_to_sixty_characters_and_cut_beyond() -> None:
    integer = {"type": "integer"}
    assert discovery.scalar_problem("x" * 58, integer, "n") == f'n: expected an integer, got str "{"x" * 58}"'
    assert discovery.scalar_problem("x" * 59, integer, "n") == f'n: expected an integer, got str "{"x" * 56}...'


def test_a_schema_with_properties_but_no_type_is_checked_as_an_object() -> None:
    document = discovery.load("batch.v1")
    schema = {"properties": {"name": {"type": "string"}}}
    assert document.value_problem({"name": "a"}, schema, "body") is None
    assert document.value_problem({"nmae": "a"}, schema, "body") == (
        "body: object has no field 'nmae' (it has: name; did you mean 'name'?)"
    )


def test_an_array_whose_items_have_no_schema_takes_any_items() -> None:
    assert discovery.load("batch.v1").value_problem([1, "a", {"b": None}], {"type": "array"}, "body.values") is None


# --- methods --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method_id", "similar"),
    [
        # most trailing parts in common first, then by name; at most six
        (
            "locations.jobs.cancel",
            [
                "projects.locations.jobs.cancel",
                "projects.locations.jobs.create",
                "projects.locations.jobs.delete",
                "projects.locations.jobs.get",
                "projects.locations.jobs.list",
                "projects.locations.operations.cancel",
            ],
        ),
        (
            "batch.jobs.tasks.get",
            [
                "projects.locations.jobs.taskGroups.tasks.get",
                "projects.locations.get",
                "projects.locations.jobs.get",
                "projects.locations.jobs.taskGroups.tasks.list",
                "projects.locations.operations.get",
            ],
        ),
        # nothing in common: no suggestion
        ("instances.start", []),
    ],
)
def test_methods_suggested_for_an_unknown_method_share_its_last_parts(method_id: str, similar: list[str]) -> None:
    assert discovery.load("batch.v1").similar_methods(method_id) == similar


def test_the_api_name_in_front_of_a_method_id_is_not_compared_with_the_methods_parts() -> None:
    """An API may have a resource named like itself (Cloud Talent's `jobs.projects.tenants.jobs`): the
    name written in front of the id is the API's, and does not count as a part the methods share."""
    resources = {
        "projects": {
            "resources": {
                "items": {"methods": {"get": {"id": "demo.projects.items.get", "httpMethod": "GET", "path": "a"}}},
                "demo": {
                    "resources": {
                        "things": {
                            "methods": {
                                "get": {"id": "demo.projects.demo.things.get", "httpMethod": "GET", "path": "b"}
                            }
                        }
                    }
                },
            }
        }
    }
    raw = {"name": "demo", "version": "v1", "rootUrl": "https://demo.googleapis.com/", "resources": resources}
    document = discovery.ApiDocument(discovery.reduce_document(raw))
    assert document.method("demo.items.get") is None
    assert document.similar_methods("demo.items.get") == ["projects.items.get", "projects.demo.things.get"]


def _reduced(properties: dict[str, Any]) -> dict[str, Any]:
    raw = {"name": "demo", "version": "v1", "rootUrl": "https://demo.googleapis.com/"}
    schema: dict[str, Any] = discovery.reduce_document(raw | {"schemas": {"Thing": {"properties": properties}}})
    return schema["schemas"]["Thing"]


@pytest.mark.parametrize(
    "descriptions",
    [
        {"workerRegion": "Where workers run. Mutually exclusive with worker_zone. If neither is set, …"},
        {"workerRegion": "Where workers run. This field is mutually exclusive with the `worker_zone` field."},
        {"workerZone": "Mutually exclusive with `worker_region` below."},
        {"workerZone": "A list. worker_region and worker_zone can't be set at the same time."},
        {"workerZone": "worker_region and worker_zone cannot be specified together."},
        {"workerZone": "The zone. Cannot be specified with worker_region."},
        {"workerRegion": "[Pick one] Where workers run.", "workerZone": "[Pick one] The zone they run in."},
    ],
)
def test_exclusive_fields_stated_in_a_fields_own_words_become_a_group(descriptions: dict[str, str]) -> None:
    properties = {
        name: {"type": "string", "description": descriptions.get(name, "")} for name in ("workerRegion", "workerZone")
    }
    assert _reduced(properties)["exclusive"] == [["workerRegion", "workerZone"]]


@pytest.mark.parametrize(
    "description",
    [
        "Mutually exclusive with Compute Engine-based options, such as gce_cluster_config.",  # not one field
        "Mutually exclusive with other_field.",  # not a field of this object
        "Only one of these may matter.",
        "[Pick one] Where workers run.",  # the only field so marked
    ],
)
def test_prose_that_names_no_other_field_of_the_object_makes_no_group(description: str) -> None:
    properties = {"workerRegion": {"type": "string", "description": description}, "workerZone": {"type": "string"}}
    assert "exclusive" not in _reduced(properties)


def test_list_and_label_limits_are_kept_from_the_descriptions_that_state_them() -> None:
    reduced = _reduced(
        {
            "taskGroups": {
                "type": "array",
                "description": "Required. TaskGroups. Only one TaskGroup is supported now.",
            },
            "groupColumns": {"type": "array", "description": "Only one level of hierarchy is supported."},
            "instances": {"type": "array", "description": "Instances. Only instances[0] is supported now."},
            "fileShares": {
                "type": "array",
                "description": "File shares. For this version, only a single file share is supported.",
            },
            "ports": {"type": "array", "description": "Ports to expose. Only a single port can be specified."},
            "networks": {"type": "array", "description": "Networks; only one subnetwork is supported."},
            "labels": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": 'No more than 32 labels can be set. Label names that start with "goog-" or "google-" '
                "are reserved for predefined labels.",
            },
        }
    )["properties"]
    assert reduced["taskGroups"]["maxItems"] == 1
    assert reduced["instances"]["maxItems"] == reduced["fileShares"]["maxItems"] == reduced["ports"]["maxItems"] == 1
    assert "maxItems" not in reduced["groupColumns"]  # "one level" is no count of the list's items
    assert "maxItems" not in reduced["networks"]  # a sentence of another noun
    assert reduced["labels"]["maxLabels"] == 32
    assert reduced["labels"]["reservedPrefixes"] == ["goog-", "google-"]


def test_a_label_length_the_description_states_is_kept_and_held() -> None:
    """Vertex AI's labels: "Label keys and values can be no longer than 64 characters"; where a
    description says 63 (BigQuery's), or nothing, Google's rule of 63 holds."""
    stated = "Label keys and values can be no longer than {} characters (Unicode codepoints), can only contain …"
    labels = {"type": "object", "additionalProperties": {"type": "string"}}
    assert (
        _reduced({"labels": {**labels, "description": stated.format(64)}})["properties"]["labels"]["maxLabelLength"]
        == 64
    )
    assert (
        "maxLabelLength"
        not in _reduced({"labels": {**labels, "description": stated.format(63)}})["properties"]["labels"]
    )
    assert "maxLabelLength" not in _reduced({"labels": labels})["properties"]["labels"]
    job = {"displayName": "nightly", "runtimeConfig": {}}
    vertex = "GoogleCloudAiplatformV1PipelineJob"
    assert _problem("aiplatform.v1", {**job, "labels": {"model": "m" * 64}}, vertex) is None
    assert _problem("aiplatform.v1", {**job, "labels": {"k" * 64: "v"}}, vertex) is None
    assert _problem("aiplatform.v1", {**job, "labels": {"model": "m" * 65}}, vertex) == (
        f"body.labels: label 'model': value '{'m' * 65}' must be at most 64 characters of a-z 0-9 _ - "
        "(international lower-case letters count as letters)"
    )
    assert "at most 63 characters" in str(
        _problem("bigquery.v2", {"labels": {"team": "t" * 64}, "query": {"query": "SELECT 1"}}, "JobConfiguration")
    )


# --- oneofs from the protos -----------------------------------------------------------------------

ONEOFS = json.loads(discovery.ONEOFS.read_text())


@pytest.mark.parametrize(
    ("api", "schema_name", "value", "problem"),
    [
        (
            "batch.v1",
            "Runnable",
            {"container": {"imageUri": "busybox"}, "script": {"text": "echo"}},
            "body: container and script are both set; Runnable takes only one of barrier, container, script",
        ),
        (
            "batch.v1",
            "InstancePolicyOrTemplate",
            {"policy": {"machineType": "e2-standard-4"}, "instanceTemplate": "t"},
            "body: instanceTemplate and policy are both set; InstancePolicyOrTemplate takes only one of "
            "instanceTemplate, policy",
        ),
        (
            "dataflow.v1b3",
            "LaunchFlexTemplateParameter",
            {
                "jobName": "j",
                "containerSpec": {"image": "i", "sdkInfo": {"language": "PYTHON"}},
                "containerSpecGcsPath": "gs://b/t.json",
            },
            "body: containerSpec and containerSpecGcsPath are both set; LaunchFlexTemplateParameter takes only one "
            "of containerSpec, containerSpecGcsPath",
        ),
        (
            "cloudtasks.v2",
            "HttpRequest",
            {"url": "https://x.test/", "oauthToken": {}, "oidcToken": {}},
            "body: oauthToken and oidcToken are both set; HttpRequest takes only one of oauthToken, oidcToken",
        ),
        (
            "dataproc.v1",
            "SparkBatch",
            {"mainJarFileUri": "gs://b/a.jar", "mainClass": "Etl"},
            "body: mainClass and mainJarFileUri are both set; SparkBatch takes only one of mainClass, mainJarFileUri",
        ),
        # a oneof whose proto comment says "Required." needs one of its fields
        ("batch.v1", "Runnable", {}, "body: Runnable needs one of container, script, barrier"),
        ("batch.v1", "Script", {"path": None}, "body: Script needs one of path, text"),
        (
            "bigquery.v2",
            "JobConfigurationExtract",
            {"destinationUris": ["gs://b/*.csv"]},
            "body: JobConfigurationExtract needs one of sourceTable, sourceModel",
        ),
        # AIP-203: a required field needs a non-empty value; `[]`, `''` or `{}` (a map) is none
        ("batch.v1", "Job", {"taskGroups": []}, "body.taskGroups: required by Job, and [] is empty"),
        (
            "bigquery.v2",
            "JobConfigurationQuery",
            {"query": ""},
            "body.query: required by JobConfigurationQuery, and ''",
        ),
        (
            "aiplatform.v1",
            "GoogleCloudAiplatformV1ExplanationMetadata",
            {"inputs": {}},
            "body.inputs: required by GoogleCloudAiplatformV1ExplanationMetadata, and {} is empty",
        ),
    ],
)
def test_what_the_api_refuses_beyond_its_schemas_types_is_refused(
    api: str, schema_name: str, value: Any, problem: str
) -> None:
    """Discovery documents drop `oneof`, and the API refuses a request that sets two fields of one;
    and a required field given empty is no value."""
    found = _problem(api, value, schema_name)
    assert found is not None and found.startswith(problem), found


def test_one_field_of_each_oneof_fits() -> None:
    """Every carried group, each field set alone in its schema, raises no oneof problem."""
    for api, schemas in ONEOFS["apis"].items():
        document = discovery.load(api)
        for schema_name, groups in schemas.items():
            for group in groups:
                for field in group["fields"]:
                    value = {field: _sample(document, document.schemas[schema_name]["properties"][field])}
                    found = document.value_problem(value, {"$ref": schema_name}, "body")
                    # deeper: the field's own; or another group of the schema that needs a field too
                    # (an extract's destination URIs, beside its source)
                    others = found is not None and not set(group["fields"]) & set(re.findall(r"\w+", found))
                    assert found is None or not found.startswith("body: ") or others, (api, found)


def _sample(document: discovery.ApiDocument, field: dict[str, Any]) -> Any:
    schema = document.resolve(field)
    kind = schema.get("type")
    if kind == "array":
        return []
    if kind == "boolean":
        return True
    if kind in ("integer", "number"):
        return 1
    if kind == "object" or "properties" in schema:
        return {}
    return schema["enum"][-1] if "enum" in schema else "x"


def test_the_carried_oneofs_name_fields_of_the_carried_documents_and_their_source() -> None:
    """Regenerating the documents cannot leave a group naming a field (or schema) they no longer
    have; the file names the googleapis commit it was read from."""
    assert ONEOFS["source"]["repository"] == "googleapis/googleapis"
    assert re.fullmatch(r"[0-9a-f]{40}", ONEOFS["source"]["commit"])
    assert sorted(ONEOFS["apis"]) == discovery.vendored_names()
    for api, schemas in ONEOFS["apis"].items():
        document = discovery.load(api)
        for schema_name, groups in schemas.items():
            properties = document.schemas[schema_name]["properties"]
            for group in groups:
                assert len(group["fields"]) >= 2 and set(group["fields"]) <= set(properties), (api, schema_name)
                assert sorted(group["fields"]) in document.schemas[schema_name]["exclusive"]


def test_oneofs_are_read_from_protos_with_their_nesting_json_names_and_required_comments() -> None:
    """What `make oneofs` reads: braces in comments and strings and a `//` in a string change no
    nesting, and a proto3 `optional` field is no oneof."""
    proto = """
    service Jobs { rpc Get(GetRequest) returns (Job) { option (google.api.http) = { get: "/v1/{name=x/*}//y" }; } }
    // A job. { not a block
    message Job {
      message Step {
        // Required. What the step runs.
        oneof action {
          string shell_command = 1;
          Script script = 2 [json_name = "scriptSource"];
        }
      }
      optional string note = 3;
      // Where it writes.
      oneof sink { string gcs_uri = 4; Table big_query_table = 5; }
    }
    """
    found = oneofs_vendor.oneofs(proto)
    assert [(f["path"], f["name"], f["fields"], f["required"]) for f in found] == [
        (["Job", "Step"], "action", ["shellCommand", "scriptSource"], True),
        (["Job"], "sink", ["gcsUri", "bigQueryTable"], False),
    ]


def test_a_required_message_given_empty_is_a_value() -> None:
    """An empty message, or an empty `google.protobuf.Value`, is set: proto3 keeps its presence."""
    pipeline = {"displayName": "p", "trainingTaskDefinition": "gs://b/d.yaml", "trainingTaskInputs": {}}
    assert _problem("aiplatform.v1", pipeline, "GoogleCloudAiplatformV1TrainingPipeline") is None
    assert _problem("batch.v1", {"taskGroups": [{"taskSpec": {}}]}, "Job") == (
        "body.taskGroups[0].taskSpec.runnables: required by TaskSpec (the API refuses the request without it)"
    )


@pytest.mark.parametrize(
    ("description", "values"),
    [
        (
            "Optional. Specifies a priority. Possible values include INTERACTIVE and BATCH. The default is X.",
            ["INTERACTIVE", "BATCH"],
        ),
        ("Possible values include GZIP, NONE, and SNAPPY.", ["GZIP", "NONE", "SNAPPY"]),
        (
            "What happens. The following values are supported: * CREATE_IF_NEEDED: create it. * CREATE_NEVER: "
            "fail. The default value is CREATE_IF_NEEDED.",
            ["CREATE_IF_NEEDED", "CREATE_NEVER"],
        ),
        # only what follows the sentence counts
        (
            "Notes: * LEGACY_NOTE: none. The following values are supported: * A_B: one. * C_D: two.",
            ["A_B", "C_D"],
        ),
        # the other ways descriptions close a list
        (
            "Required. The supported types are DAY, HOUR, MONTH, and YEAR, which will generate…",
            ["DAY", "HOUR", "MONTH", "YEAR"],
        ),
        (
            "The supported values are UTF-8, ISO-8859-1, UTF-16BE, and UTF-32LE. The default value is UTF-8.",
            ["UTF-8", "ISO-8859-1", "UTF-16BE", "UTF-32LE"],
        ),
        (
            "Possible values: UNSPECIFIED, EXACTLY_ONCE and AT_LEAST_ONCE",
            ["UNSPECIFIED", "EXACTLY_ONCE", "AT_LEAST_ONCE"],
        ),
        (
            "The following modes are supported: * AUTO: infer. * STRINGS: as text. * CUSTOM: given.",
            ["AUTO", "STRINGS", "CUSTOM"],
        ),
        ('If specified, the protocol. Allowed values are "http1" and "h2c".', ["HTTP1", "H2C"]),
        (
            'It must be one of "low-latency", "medium-latency", or "high-latency".',
            ["LOW-LATENCY", "MEDIUM-LATENCY", "HIGH-LATENCY"],
        ),
        # a list that says more than its values is no list of all the field takes
        ("Possible values include CSV or AVRO for tables and ML_TF_SAVED_MODEL for models.", []),
        ("Valid values are: numeric, image. Defaults to numeric.", []),
        ('Supported values are BCP-47 language codes (e.g. "en", "es", "fr").', []),
        ("Possible values include: * 6 (Default) * 12", []),
        ("The compression type, such as GZIP.", []),
    ],
)
def test_a_string_fields_values_listed_in_its_description_are_kept(description: str, values: list[str]) -> None:
    raw = {
        "name": "demo",
        "version": "v1",
        "rootUrl": "https://demo.googleapis.com/",
        "schemas": {
            "Thing": {"type": "object", "properties": {"mode": {"type": "string", "description": description}}}
        },
    }
    field = discovery.reduce_document(raw)["schemas"]["Thing"]["properties"]["mode"]
    assert field.get("proseEnum", []) == values


@pytest.mark.parametrize(
    ("field", "description", "bounds"),
    [
        (
            {"type": "string", "format": "google-duration"},
            "Minimum value is 10 minutes; maximum value is 14 days.",
            {"minimum": 600, "maximum": 1209600},
        ),
        (
            {"type": "string", "format": "google-duration"},
            "Optional. The TTL. Minimum value is 5 minutes; maximum "
            "value is 14 days (see JSON representation of Duration).",
            {"minimum": 300, "maximum": 1209600},
        ),
        (
            {"type": "integer", "format": "int32"},
            "Minimum value is 1, maximum value is 32.",
            {"minimum": 1, "maximum": 32},
        ),
        ({"type": "integer", "format": "int32"}, "How many. The maximum allowed value is 5,000.", {"maximum": 5000}),
        ({"type": "string", "format": "int64"}, "Maximum value is 240.", {"maximum": 240}),
        ({"type": "number", "format": "double"}, "The maximum allowed value is 500.", {"maximum": 500}),
        ({"type": "integer"}, "Maximum value is 10.", {"maximum": 10}),  # an integer with no format: an int32
        # a duration's bound without a unit is skipped, and the next one read
        (
            {"type": "string", "format": "google-duration"},
            "Maximum value is 10. Minimum value is 5 minutes.",
            {"minimum": 300},
        ),
        # a range in a sentence of its own: closed, half-open (an integer's open end is the next whole number)
        (
            {"type": "integer", "format": "int32"},
            "Retries. The valid value range is [0, 10].",
            {"minimum": 0, "maximum": 10},
        ),
        ({"type": "string", "format": "int64"}, "The valid value range is [0, 100).", {"minimum": 0, "maximum": 99}),
        ({"type": "integer"}, "Valid range of its value is [1, 100], inclusively.", {"minimum": 1, "maximum": 100}),
        ({"type": "number"}, "It must be in the range [-90.0, +90.0].", {"minimum": -90, "maximum": 90}),
        ({"type": "number"}, "The valid range is (0.0, 2.0].", {"maximum": 2}),  # a number's open end: left out
        (
            {"type": "integer"},
            "Range: [1, 1000]. If VPC-SC is enabled, the acceptable range is [1, 100].",
            {"minimum": 1, "maximum": 1000},
        ),
        ({"type": "integer"}, "The value must be between 5 and 100.", {"minimum": 5, "maximum": 100}),
        ({"type": "integer"}, "Must be between -3 and 3.", {"minimum": -3, "maximum": 3}),
        (
            {"type": "string", "format": "google-duration"},
            "Value should be between 0 and 600 seconds.",
            {"minimum": 0, "maximum": 600},
        ),
        ({"type": "integer"}, "Instances during execution, from 1 to 1000.", {"minimum": 1, "maximum": 1000}),
        ({"type": "integer"}, "Local SSDs, from 0 to 8 (default is 0).", {"minimum": 0, "maximum": 8}),
        ({"type": "integer"}, "The valid range is (0, 10].", {"minimum": 1, "maximum": 10}),
        (
            {"type": "string", "format": "google-duration"},
            "Must be between 1 and 5. Value should be between 1 and 10 minutes.",  # the first names no unit
            {"minimum": 60, "maximum": 600},
        ),
        (
            {"type": "string", "format": "google-duration"},
            "Value should be between 30 seconds and 2 hours.",
            {"minimum": 30, "maximum": 7200},
        ),
        ({"type": "integer"}, "Mode bits, from 0 to 0777 (octal).", {}),
        # a range of one case, not of the field; octal; a range the sentence goes on to qualify
        (
            {"type": "integer"},
            "For modelType cloud, the budget must be between 8,000 and 800,000 milli node hours.",
            {},
        ),
        (
            {"type": "string", "format": "google-duration"},
            "For HTTP tasks, the default is 10 minutes. The deadline must be in the interval [15 seconds, 30 minutes].",
            {},
        ),
        ({"type": "integer"}, "Must be a value between 0000 and 0777 (octal), defaulting to 0444.", {}),
        ({"type": "integer"}, "Must be from 1 to 31 and valid for the year and month, or 0 to specify a year.", {}),
        # a bound the API coerces to refuses nothing
        ({"type": "integer"}, "The maximum value is 100; values above 100 will be coerced to 100.", {}),
        ({"type": "integer"}, "The default and maximum value is 100.", {}),
        # a bound of a case, not of the field
        ({"type": "integer"}, "Maximum value for liveness probe is 3600.", {}),
        # a duration's bound names its unit; a text field has none
        ({"type": "string", "format": "google-duration"}, "Maximum value is 10.", {}),
        ({"type": "string"}, "Maximum value is 10.", {}),
        # both ends in one sentence; a sign
        (
            {"type": "string", "format": "google-duration"},
            "Defaults to 7 days. Cannot be more than 31 days or less than 10 minutes.",
            {"minimum": 600, "maximum": 2678400},
        ),
        ({"type": "integer"}, "Cannot be more than 50 or less than 2.", {"minimum": 2, "maximum": 50}),
        ({"type": "integer"}, "Cannot be more than 1,500 or less than 2.", {"minimum": 2, "maximum": 1500}),
        # a duration's bounds name their units, each; the first sentence without them is skipped
        (
            {"type": "string", "format": "google-duration"},
            "Cannot be more than 31 or less than 10 minutes. Cannot be more than 2 days or less than 1 hour.",
            {"minimum": 3600, "maximum": 172800},
        ),
        # an open end of a number's range is left out (an integer's is the next whole number)
        ({"type": "number"}, "The valid value range is [0.5, 100).", {"minimum": 0.5}),
        (
            {"type": "integer"},
            "The value must be positive, and less than or equal to 1,000.",
            {"minimum": 1, "maximum": 1000},
        ),
        ({"type": "integer"}, "Number of steps. Must be non-negative.", {"minimum": 0}),
        ({"type": "integer"}, "Required. The number requested. It must be positive.", {"minimum": 1}),
        ({"type": "integer"}, "Must be greater than 0.", {"minimum": 1}),
        ({"type": "number"}, "Distance between boundaries. Must be greater than 0.", {"minimum": 0}),
        ({"type": "string", "format": "google-duration"}, "Offset, e.g. 10.5s. Must be non-negative.", {"minimum": 0}),
        (
            {"type": "integer"},
            "Workers. The value must be positive, and less than or equal to 100.",
            {"minimum": 1, "maximum": 100},
        ),
        # a sign of one case, or qualified further
        ({"type": "integer"}, "If `units` is positive, `nanos` must be positive or zero.", {}),
        ({"type": "string", "format": "google-duration"}, "Must be non-negative and greater than `start`.", {}),
        ({"type": "string"}, "Must be non-negative.", {}),
    ],
)
def test_bounds_a_description_states_as_a_sentence_are_kept(
    field: dict[str, Any], description: str, bounds: dict[str, int]
) -> None:
    reduced = _reduced({"n": field | {"description": description}})["properties"]["n"]
    assert {key: reduced[key] for key in ("minimum", "maximum") if key in reduced} == bounds


@pytest.mark.parametrize(
    ("api", "schema_name", "value", "problem"),
    [
        ("dataproc.v1", "ExecutionConfig", {"ttl": "60s"}, "body.ttl: 60s is below 600s, the minimum its description"),
        (
            "dataproc.v1",
            "ExecutionConfig",
            {"ttl": "1209600.5s"},
            "body.ttl: 1209600.5s is above 1209600s, the maximum",
        ),
        (
            "dataproc.v1",
            "JobScheduling",
            {"maxFailuresPerHour": "11"},
            "body.maxFailuresPerHour: 11 is above 10, the maximum",
        ),
        (
            "cloudtasks.v2",
            "RateLimits",
            {"maxDispatchesPerSecond": 500.5},
            "body.maxDispatchesPerSecond: 500.5 is above 500",
        ),
        ("run.v2", "GoogleCloudRunV2Probe", {"timeoutSeconds": -1}, "body.timeoutSeconds: -1 is below 1, the minimum"),
    ],
)
def test_a_value_past_its_stated_bound_is_refused(api: str, schema_name: str, value: Any, problem: str) -> None:
    found = _problem(api, value, schema_name)
    assert found is not None and found.startswith(problem), found


def test_an_untyped_field_takes_json_and_names_what_is_not() -> None:
    """A `google.protobuf.Value` (a pipeline's parameter values) holds any JSON, and only JSON."""
    runtime = "GoogleCloudAiplatformV1PipelineJobRuntimeConfig"
    assert _problem("aiplatform.v1", {"parameterValues": {"m": {2024: "x"}}}, runtime) == (
        "body.parameterValues.m: the key 2024 is a number, not text: quote it ('2024')"
    )
    assert _problem("aiplatform.v1", {"parameterValues": {"z": [1, 2j]}}, runtime) == (
        "body.parameterValues.z[1]: a complex has no JSON form (JSON holds text, numbers, true, false, null, lists "
        "and mappings); quote it to send it as text"
    )
    assert _problem("aiplatform.v1", {"parameterValues": {"ok": {"a": [1, 2.5, None, True, "x"]}}}, runtime) is None


def test_a_numbers_zero_is_proto3s_default_and_fits_any_bound() -> None:
    """0 in an integer or a number is the same on the wire as leaving the field out; a duration is a
    message, whose 0s is a value."""
    assert _problem("batch.v1", {"runnables": RUNNABLES, "maxRetryCount": 0}, "TaskSpec") is None
    assert _problem("dataflow.v1b3", {"maxWorkers": 0}, "FlexTemplateRuntimeEnvironment") is None
    assert _problem("batch.v1", {"runnables": RUNNABLES, "maxRetryCount": 11}, "TaskSpec") == (
        "body.maxRetryCount: 11 is above 10, the maximum its description states"
    )
    assert _problem("dataproc.v1", {"ttl": "0s"}, "ExecutionConfig") == (
        "body.ttl: 0s is below 600s, the minimum its description states"
    )


def test_a_bigtable_column_named_by_its_qualifier_string_needs_no_encoded_one() -> None:
    """BigtableColumn.qualifierEncoded is "[Required]", and "If the qualifier is valid UTF-8 string,
    it can be specified in the qualifier_string field" (NOT_REQUIRED)."""
    assert _problem("bigquery.v2", {"qualifierString": "email"}, "BigtableColumn") is None


def test_a_maximum_the_apis_limits_have_raised_is_not_kept() -> None:
    """Dataflow's maxWorkers says "from 1 to 1000"; its quotas allow a job 2,000 workers, 4,000
    without a worker zone (NOT_BOUNDED)."""
    assert _problem("dataflow.v1b3", {"maxWorkers": 4000}, "FlexTemplateRuntimeEnvironment") is None
    assert _problem("dataflow.v1b3", {"maxWorkers": -1}, "FlexTemplateRuntimeEnvironment") == (
        "body.maxWorkers: -1 is below 1, the minimum its description states"
    )
    classic = discovery.load("dataflow.v1b3").schemas["RuntimeEnvironment"]["properties"]["maxWorkers"]
    assert "maximum" not in classic and classic["minimum"] == 1


def test_a_value_within_its_stated_bounds_fits() -> None:
    assert _problem("dataproc.v1", {"ttl": "600s"}, "ExecutionConfig") is None
    assert _problem("dataproc.v1", {"ttl": "1209600s", "idleTtl": "3600s"}, "ExecutionConfig") is None
    assert _problem("dataproc.v1", {"maxFailuresPerHour": 10, "maxFailuresTotal": "240"}, "JobScheduling") is None
    assert (
        _problem("cloudtasks.v2", {"maxDispatchesPerSecond": "500", "maxConcurrentDispatches": 5000}, "RateLimits")
        is None
    )


@pytest.mark.parametrize(
    ("field", "description", "rules"),
    [
        (
            {"type": "string"},
            "Required. The name. The name can be up to 128 characters long and can consist of any UTF-8 characters.",
            {"maxLength": 128},
        ),
        ({"type": "string"}, "May be up to 128 Unicode characters.", {"maxLength": 128}),
        ({"type": "string"}, "The maximum length is 1,024 characters.", {"maxLength": 1024}),
        ({"type": "string"}, "Maximum length of 1024 characters.", {"maxLength": 1024}),
        ({"type": "string"}, "Location. The maximum length is 2056 bytes.", {"maxBytes": 2056}),
        ({"type": "string"}, "Name. Must not exceed 32768 characters.", {"maxLength": 32768}),
        ({"type": "string"}, "The filename must be less than 255 characters and cannot contain `.", {"maxLength": 254}),
        (
            {"type": "string"},
            "The deployment group can be no longer than 64 characters (eg: 'test').",
            {"maxLength": 64},
        ),
        (
            {"type": "array", "items": {"type": "string"}},
            "Aliases. Each alias can be up to 128 characters.",
            {"maxLength": 128},  # of each item
        ),
        ({"type": "string"}, "Must be a valid Cloud Storage URL, beginning with `gs://`.", {"prefix": ["gs://"]}),
        ({"type": "string"}, "The URI must start with `gs://`.", {"prefix": ["gs://"]}),
        (
            {"type": "string"},
            'Required. The full url path. This string must begin with either "http://" or "https://". The maximum '
            "allowed URL length is 2083 characters after encoding.",
            {"prefix": ["http://", "https://"], "maxLength": 2083},
        ),
        ({"type": "string"}, "A description with 2048 characters or less.", {"maxLength": 2048}),
        ({"type": "string"}, "The name is limited to 100 characters.", {"maxLength": 100}),
        ({"type": "string"}, "Optional. Cannot be more than 80 characters.", {"maxLength": 80}),
        ({"type": "string"}, "The name can be up to 128 characters long and any UTF-8 characters.", {"maxLength": 128}),
        # two limits in one sentence, each for a case: neither holds for every value
        ({"type": "string"}, "Max length of 24 characters for user-scoped, 40 characters for event-scoped.", {}),
        (
            {"type": "string"},
            "It must be in the following format: `gs://{bucket_id}/{object_id}`",
            {"prefix": ["gs://"]},
        ),
        # a rule of one case; a form the API ignores rather than refuses; a bucket without gs://
        ({"type": "string"}, "If the first character is a number, this value may be up to 9 characters.", {}),
        (
            {"type": "string"},
            "URIs must be specified in the following format: `gs://b/o` (other URI formats are ignored).",
            {},
        ),
        ({"type": "string"}, 'The bucket name must be without any prefix like "gs://".', {}),
        ({"type": "string"}, "The path must be a URL or Cloud Storage path (`gs://path-to-file/file-name`).", {}),
        # not text the API reads as characters
        ({"type": "string", "format": "byte"}, "The maximum length is 10 bytes.", {}),
        ({"type": "string", "enum": ["A"]}, "The maximum length is 10 characters.", {}),
    ],
)
def test_a_strings_length_and_prefix_its_description_states_are_kept(
    field: dict[str, Any], description: str, rules: dict[str, Any]
) -> None:
    reduced = _reduced({"s": field | {"description": description}})["properties"]["s"]
    reduced = reduced.get("items", {}) if field["type"] == "array" else reduced
    assert {key: reduced[key] for key in ("maxLength", "maxBytes", "prefix") if key in reduced} == rules


def test_an_identifier_deeper_than_the_request_itself_is_required_where_the_document_says() -> None:
    """A destination table's `tableId` or an env var's `name` names what the request refers to: no path
    supplies it. One at the top of the request (triggers.run's `triggerId`, carried by its path) and a
    `projectId` anywhere (the call's project) are not asked for."""
    query = {"query": "SELECT 1", "destinationTable": {"datasetId": "d"}}
    assert _problem("bigquery.v2", query, "JobConfigurationQuery") == (
        "body.destinationTable.tableId: required by TableReference (the API refuses the request without it)"
    )
    query["destinationTable"]["tableId"] = "t"
    assert _problem("bigquery.v2", query, "JobConfigurationQuery") is None
    container = {"image": "us-docker.pkg.dev/p/r/i", "env": [{"value": "x"}]}
    assert _problem("run.v2", container, "GoogleCloudRunV2Container") == (
        "body.env[0].name: required by GoogleCloudRunV2EnvVar (the API refuses the request without it)"
    )
    assert _problem("cloudbuild.v1", {"source": {"branchName": "main"}}, "RunBuildTriggerRequest") is None


def test_a_bigquery_pick_one_group_needs_one_of_its_fields() -> None:
    """BigQuery's "[Pick one]": a copy needs its source table or tables, an extract its destination URIs."""
    table = {"projectId": "p", "datasetId": "d", "tableId": "t"}
    copy, extract = "JobConfigurationTableCopy", "JobConfigurationExtract"
    assert _problem("bigquery.v2", {"destinationTable": table}, copy) == (
        "body: JobConfigurationTableCopy needs one of sourceTable, sourceTables (the API refuses it without)"
    )
    assert _problem("bigquery.v2", {"sourceTables": [table], "destinationTable": table}, copy) is None
    assert _problem("bigquery.v2", {"sourceTable": table}, extract) == (
        "body: JobConfigurationExtract needs one of destinationUri, destinationUris (the API refuses it without)"
    )
    assert _problem("bigquery.v2", {"sourceTable": table, "destinationUris": ["gs://b/o-*.csv"]}, extract) is None


def test_each_item_of_a_list_is_held_to_the_values_its_description_lists() -> None:
    """BigQuery's `schemaUpdateOptions`: "One or more of the following values are specified: * …"."""
    query = {"query": "SELECT 1"}
    allowed = {**query, "schemaUpdateOptions": ["ALLOW_FIELD_ADDITION", "allow_field_relaxation"]}
    assert _problem("bigquery.v2", allowed, "JobConfigurationQuery") is None
    assert _problem("bigquery.v2", {**query, "schemaUpdateOptions": ["ALLOW_ALL"]}, "JobConfigurationQuery") == (
        "body.schemaUpdateOptions[0]: 'ALLOW_ALL' is not one of ALLOW_FIELD_ADDITION, ALLOW_FIELD_RELAXATION (the "
        "values its description lists)"
    )


def test_a_control_character_is_refused_where_a_name_or_a_location_goes_and_taken_in_a_display_name() -> None:
    """A display name is text for people (Vertex: "can consist of any UTF-8 characters"); a Dataproc
    metastore service, an IP range or a container image names something, and no name holds a newline,
    nor a C1 control character such as NEL (U+0085)."""
    pipeline = "GoogleCloudAiplatformV1PipelineJob"
    assert _problem("aiplatform.v1", {"displayName": "nightly\ntraining"}, pipeline) is None
    peripherals = {"metastoreService": "projects/p/locations/us-central1/services/m\n"}
    assert _problem("dataproc.v1", peripherals, "PeripheralsConfig") == (
        "body.metastoreService: 'projects/p/locations/us-central1/services/m\\n' holds a control character (a "
        "newline?); no URI, path, email, name or id does"
    )
    container = {"imageUri": "gcr.io/p/i\x85"}
    assert "holds a control character" in (_problem("batch.v1", container, "Container") or "")


def test_a_string_past_its_stated_length_or_without_its_prefix_is_refused() -> None:
    """Vertex's display names (128 characters), Dataflow's Cloud Storage paths, Cloud Run's env values
    (32,768 bytes, counted in UTF-8); an empty string is proto3's default and passes."""
    pipeline = "GoogleCloudAiplatformV1PipelineJob"
    assert _problem("aiplatform.v1", {"displayName": "é" * 128}, pipeline) is None
    assert _problem("aiplatform.v1", {"displayName": "é" * 129}, pipeline) == (
        "body.displayName: 129 characters; its description allows at most 128"
    )
    environment = "FlexTemplateRuntimeEnvironment"
    assert _problem("dataflow.v1b3", {"tempLocation": "gs://b/tmp", "stagingLocation": ""}, environment) is None
    assert _problem("dataflow.v1b3", {"tempLocation": "/tmp/b"}, environment) == (
        "body.tempLocation: '/tmp/b' does not start with gs://, as its description requires"
    )
    # a resource's name: its description's limit is its id's (Cloud Tasks: "The maximum length is 500
    # characters.", of TASK_ID), not the whole name's
    queue, http = "projects/p/locations/us-central1/queues/q", {"httpRequest": {"url": "https://example.com/"}}
    assert _problem("cloudtasks.v2", {**http, "name": f"{queue}/tasks/{'t' * 500}"}, "Task") is None
    assert _problem("cloudtasks.v2", {**http, "name": f"{queue}/tasks/{'t' * 501}"}, "Task") == (
        f"body.name: the id '{'t' * 501}' is 501 characters; its description allows at most 500"
    )
    # a URL's schemes: 'must begin with either "http://" or "https://"'; 2083 characters at most
    assert _problem("cloudtasks.v2", {"url": "ftp://example.com/run"}, "HttpRequest") == (
        "body.url: 'ftp://example.com/run' does not start with http:// or https://, as its description requires"
    )
    assert _problem("cloudtasks.v2", {"url": "https://example.com/" + "r" * 2063}, "HttpRequest") is None
    assert _problem("cloudtasks.v2", {"url": "https://example.com/" + "r" * 2064}, "HttpRequest") == (
        "body.url: 2084 characters; its description allows at most 2083"
    )
    variable = "GoogleCloudRunV2EnvVar"
    assert _problem("run.v2", {"name": "A", "value": "é" * 16384}, variable) is None
    assert _problem("run.v2", {"name": "A", "value": "é" * 16385}, variable) == (
        "body.value: 32770 bytes (UTF-8); its description allows at most 32768"
    )
    assert _problem("pubsub.v1", {"name": "projects/p/topics/t", "messageRetentionDuration": "599s"}, "Topic") == (
        "body.messageRetentionDuration: 599s is below 600s, the minimum its description states"
    )


def test_a_value_outside_the_listed_ones_is_refused_in_any_case_it_is_written() -> None:
    """BigQuery's priority: INTERACTIVE or BATCH; written in another case it is the same value."""
    query = {"query": "SELECT 1"}
    assert _problem("bigquery.v2", {**query, "priority": "batch"}, "JobConfigurationQuery") is None
    assert _problem("bigquery.v2", {**query, "priority": "URGENT"}, "JobConfigurationQuery") == (
        "body.priority: 'URGENT' is not one of INTERACTIVE, BATCH (the values its description lists)"
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"runnables": None}, "body.runnables: is empty (null); a list is needed here"),
        ({"runnables": RUNNABLES, "environment": None}, "body.environment: is empty (null); an object is needed here"),
        (
            {"runnables": RUNNABLES, "environment": {"variables": None}},
            "body.environment.variables: is empty (null); an object is needed here",  # a map
        ),
        (
            {"runnables": [{"container": {"imageUri": "i", "commands": [None]}}]},
            "body.runnables[0].container.commands[0]: is empty (null); a value is needed here",
        ),
    ],
)
def test_a_null_where_the_schema_needs_something_says_what(value: dict[str, Any], problem: str) -> None:
    """An empty YAML key is null: the line says what to give instead, a list, an object or a value."""
    hint = ": give it a value (an empty key in YAML is null) or remove the key"
    assert _problem("batch.v1", value, "TaskSpec") == problem + hint


JOB = {"taskGroups": [{"taskSpec": TASK_SPEC}]}


@pytest.mark.parametrize(
    ("api", "schema_name", "value", "problem"),
    [
        (
            "batch.v1",
            "Job",
            {**JOB, "labels": {2024: "q4"}},
            "body.labels: the key 2024 is a number, not text: quote it",
        ),
        (
            "batch.v1",
            "Job",
            {**JOB, "labels": {"goog-team": "x"}},
            "body.labels: label 'goog-team': keys starting with 'goog-' or 'google-' are reserved by the API",
        ),
        # labels deeper than a body's own: a Flex Template's environment
        (
            "dataflow.v1b3",
            "LaunchFlexTemplateParameter",
            {
                "jobName": "j",
                "containerSpecGcsPath": "gs://b/t.json",
                "environment": {"additionalUserLabels": {"T": "x"}},
            },
            "body.environment.additionalUserLabels: label key 'T': 1-63 characters",
        ),
    ],
)
def test_keys_and_labels_the_api_refuses_say_why(api: str, schema_name: str, value: Any, problem: str) -> None:
    found = _problem(api, value, schema_name)
    assert found is not None and found.startswith(problem), found


def test_a_required_name_may_be_left_to_the_call_or_the_api() -> None:
    """Pub/Sub's Topic marks `name` Required., and topics.create carries it in its path."""
    assert _problem("pubsub.v1", {"labels": {"team": "a"}}, "Topic") is None


@pytest.mark.parametrize(
    ("description", "client_named"),
    [
        ("Name of the resource. Provided by the client when the resource is created.", True),
        ("Required. A client-assigned identifier, such as `load-balancer-exclusion`.", True),
        ("The name of this cluster. The name must be unique within this project and location.", True),
        # a full name (`projects/…`, `accounts/{account}/…`) is not the id itself
        ("The format will be projects/{project_number}/feeds/{client-assigned feed identifier}.", False),
        ("Format: `accounts/{account}/productInputs/{input}`. The input must be unique within an account.", False),
        ("The display name of the resource.", False),
        ("Required. The client-assigned identifier, as in projects/my-project/sinks/my-sink.", False),
    ],
)
def test_a_name_that_is_the_id_the_client_picks_is_marked_so(description: str, client_named: bool) -> None:
    reduced = _reduced({"name": {"type": "string", "description": description}})["properties"]["name"]
    assert reduced.get("clientNamed", False) is client_named
    other = _reduced({"title": {"type": "string", "description": description}})["properties"]["title"]
    assert "clientNamed" not in other  # only a `name`


@pytest.mark.parametrize(
    ("description", "uuid"),
    [
        ("The request ID must be a valid UUID with the exception that zero UUID is not supported.", True),
        ("Optional. A unique identifier for this request. Must be a UUID4.", True),
        ("Optional. Idempotent request UUID.", True),
        ("Optional. A unique identifier for this request. A random UUID is recommended.", False),
    ],
)
def test_a_request_id_that_must_be_a_uuid_is_marked_so(description: str, uuid: bool) -> None:
    assert (
        _reduced({"requestId": {"type": "string", "description": description}})["properties"]["requestId"].get(
            "uuid", False
        )
        is uuid
    )


@pytest.mark.parametrize(
    ("description", "required"),
    [
        ("Required. The network.", True),
        ("[Required] The table.", True),
        ("Required. The network. Deprecated, use network_config.network instead.", False),
        ("Required. The network. Deprecated: use network_config.", False),
        ("Required. It replaces the deprecated field `old`.", True),  # a word, not the field's status
        ("The network.", False),
    ],
)
def test_a_field_is_required_where_its_description_says_so_unless_deprecated(description: str, required: bool) -> None:
    field = _reduced({"network": {"type": "string", "description": description}})["properties"]["network"]
    assert field.get("required", False) is required
    raw = {"name": "demo", "version": "v1", "rootUrl": "https://demo.googleapis.com/"}
    method = {"id": "demo.things.create", "httpMethod": "POST", "path": "v1/things"}
    method["parameters"] = {"thingId": {"location": "query", "type": "string", "description": description}}
    reduced = discovery.reduce_document(raw | {"resources": {"things": {"methods": {"create": method}}}})
    assert reduced["methods"]["demo.things.create"]["parameters"]["thingId"].get("required", False) is required


def test_a_name_whose_description_says_a_taken_one_fails_is_a_resource_id() -> None:
    taken = "If the specified name is in use by a job, the creation request fails with an ALREADY_EXISTS error."
    assert _reduced({"name": {"type": "string", "description": taken}})["properties"]["name"]["resourceId"] is True
    gke = "Will return a 409 if the cluster already exists."
    assert _reduced({"name": {"type": "string", "description": gke}})["properties"]["name"]["resourceId"] is True
    plain = "The name. It already exists in the other table."
    assert "resourceId" not in _reduced({"name": {"type": "string", "description": plain}})["properties"]["name"]


def test_a_request_id_is_never_read_as_the_new_resources_id() -> None:
    """A `requestId` dedupes a request, not a resource, whatever words its description uses."""
    words = "A unique client-assigned identifier for this request."
    raw = {"name": "demo", "version": "v1", "rootUrl": "https://demo.googleapis.com/"}
    method = {"id": "demo.things.create", "httpMethod": "POST", "path": "v1/things"}
    method["parameters"] = {name: {"location": "query", "description": words} for name in ("requestId", "thingId")}
    reduced = discovery.reduce_document(raw | {"resources": {"things": {"methods": {"create": method}}}})
    parameters = reduced["methods"]["demo.things.create"]["parameters"]
    assert "resourceId" not in parameters["requestId"] and parameters["thingId"]["resourceId"] is True
    fields = _reduced({name: {"type": "string", "description": words} for name in ("requestId", "thingId")})
    assert "resourceId" not in fields["properties"]["requestId"] and fields["properties"]["thingId"]["resourceId"]


def test_a_lone_pick_one_field_needs_no_group() -> None:
    """BigQuery's "[Pick one]" needs one of several fields; a single field so marked makes no group."""
    assert "oneOfRequired" not in _reduced({"a": {"type": "string", "description": "[Pick one] A."}})
    two = _reduced({name: {"type": "string", "description": f"[Pick one] {name}."} for name in ("a", "b")})
    assert two["oneOfRequired"] == [["a", "b"]]


def test_an_id_anywhere_in_the_request_is_held_to_its_stated_rule() -> None:
    """An `…Id` is held whole (a `/` in it is no full name); a full `name`'s rule is of its last
    segment; a `name` that is the id itself (Cloud Build's trigger) is held whole; an empty one is
    proto3's default."""
    reference = {"projectId": "p", "datasetId": "a/daily"}
    assert _problem("bigquery.v2", reference, "DatasetReference") == (
        "body.datasetId: 'a/daily' is not an id bigquery.v2 takes: 1-1024 characters of a-z A-Z 0-9 _ "
        "(as its description states)"
    )
    http = {"httpRequest": {"url": "https://example.com/"}}
    assert _problem("cloudtasks.v2", {**http, "name": "projects/p/locations/l/queues/q/tasks/t_1"}, "Task") is None
    assert _problem("cloudtasks.v2", {**http, "name": "projects/p/locations/l/queues/q/tasks/t.1"}, "Task") == (
        "body.name: the id 't.1' in 'projects/p/locations/l/queues/q/tasks/t.1' is not an id cloudtasks.v2 "
        "takes: 1-500 characters of a-z A-Z 0-9 _ - (as its description states)"
    )
    assert _problem("cloudtasks.v2", {**http, "name": ""}, "Task") is None
    trigger = {"name": "team/nightly", "build": {"steps": [{"name": "ubuntu"}]}}
    assert "body.name: 'team/nightly' is not an id cloudbuild.v1 takes" in str(
        _problem("cloudbuild.v1", trigger, "BuildTrigger")
    )


def _reduced_schemas(schemas: dict[str, Any]) -> dict[str, Any]:
    raw = {"name": "demo", "version": "v1", "rootUrl": "https://demo.googleapis.com/", "schemas": schemas}
    reduced: dict[str, Any] = discovery.reduce_document(raw)["schemas"]
    return reduced


def test_an_id_in_a_reference_takes_the_rule_stated_where_the_id_is_the_resources_own() -> None:
    """BigQuery states the dataset id's rule once, on `DatasetReference.datasetId`; a table's
    reference to its dataset is held to it too, and says where the rule is stated. Outside a
    reference, or where the document states two rules for the name, nothing is inherited."""
    rule = "Required. The ID must contain only letters (a-z, A-Z), numbers (0-9), or underscores (_)."
    plain = {"type": "string", "description": "Required. The ID of the dataset containing this table."}
    schemas = _reduced_schemas(
        {
            "DatasetReference": {"properties": {"datasetId": {"type": "string", "description": rule}}},
            "TableReference": {"properties": {"datasetId": plain}},
            "JobStatistics": {"properties": {"datasetId": plain}},
        }
    )
    inherited = schemas["TableReference"]["properties"]["datasetId"]["idRule"]
    assert inherited["pattern"] == schemas["DatasetReference"]["properties"]["datasetId"]["idRule"]["pattern"]
    assert inherited["words"].endswith("(as the description of DatasetReference.datasetId states)")
    assert "idRule" not in schemas["JobStatistics"]["properties"]["datasetId"]
    other = {"type": "string", "description": "The ID must contain only lowercase letters (a-z)."}
    two_rules = _reduced_schemas(
        {
            "DatasetReference": {"properties": {"datasetId": {"type": "string", "description": rule}}},
            "LegacyDataset": {"properties": {"datasetId": other}},
            "TableReference": {"properties": {"datasetId": plain}},
        }
    )
    assert "idRule" in two_rules["LegacyDataset"]["properties"]["datasetId"]
    assert "idRule" not in two_rules["TableReference"]["properties"]["datasetId"]


def test_a_tables_dataset_id_is_held_to_the_rule_bigquery_states_for_dataset_ids() -> None:
    table = {"projectId": "p", "datasetId": "my-dataset", "tableId": "t"}
    assert _problem("bigquery.v2", table, "TableReference") == (
        "body.datasetId: 'my-dataset' is not an id bigquery.v2 takes: 1-1024 characters of a-z A-Z 0-9 _ "
        "(as the description of DatasetReference.datasetId states)"
    )
    assert _problem("bigquery.v2", {**table, "datasetId": "my_dataset"}, "TableReference") is None
