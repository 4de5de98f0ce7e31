"""The `bigquery_job` target in-process, against the fake BigQuery API (checked against
`bigquery.v2.json`): what a route may say, what jobs.insert receives, and how every answer
becomes an outcome. The same paths through a real `runonce serve` are in test_bigquery_job_e2e.py."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from runonce.routes import parse_routes
from runonce.settings import ConfigError
from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown, TargetThrottled
from runonce.targets.bigquery_job import BigQueryJobTarget, BigQueryJobTargetConfig, job_id_for, parse_resource
from tests.fakes.bigquery import GET, INSERT, FakeBigQuery
from tests.fakes.metadata import FakeMetadataServer, MetadataTokenAuth

PROJECT = "runonce-test"
TABLE = {"projectId": PROJECT, "datasetId": "sales", "tableId": "daily"}
QUERY = {"query": {"query": "MERGE t USING s ON t.day = DATE(@schedule_time) WHEN NOT MATCHED THEN INSERT ROW"}}


@pytest.fixture(scope="module")
def bigquery(metadata: FakeMetadataServer) -> Iterator[FakeBigQuery]:
    fake = FakeBigQuery(metadata)
    yield fake
    fake.close()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=3) as client:
        yield client


def target_for(
    bigquery: FakeBigQuery,
    http: httpx.AsyncClient,
    metadata: FakeMetadataServer,
    configuration: dict[str, Any] | None = None,
    location: str = "US",
) -> BigQueryJobTarget:
    config = BigQueryJobTargetConfig(
        type="bigquery_job", project=PROJECT, location=location, configuration=configuration or QUERY
    )
    return BigQueryJobTarget(config, http, MetadataTokenAuth(metadata.host), bigquery.url)


_runs = iter(range(10**6))


def new_request(schedule_time: str | None = "2026-10-16T03:00:00Z", payload: dict | None = None) -> DispatchRequest:
    run_id = hashlib.sha256(f"bigquery-run-{next(_runs)}".encode()).hexdigest()
    return DispatchRequest(
        run_id=run_id,
        route="rollup",
        job="nightly-job",
        schedule_time=schedule_time,
        source="scheduler",
        payload=payload or {},
    )


# --- what a route may say ------------------------------------------------------------------------


def error_of(target: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_routes(
            json.dumps({"routes": {"r": {"target": {"type": "bigquery_job", **target}}}}), "routes file r.yaml"
        )
    return str(caught.value)


VALID = {"project": PROJECT, "location": "US", "configuration": QUERY}


@pytest.mark.parametrize("location", ["US", "eu", "us-central1", "europe-west4", "aws-us-east-1", "azure-eastus2"])
def test_a_route_runs_in_any_bigquery_location(location: str) -> None:
    """The multi-regions, the regions, and BigQuery Omni's AWS and Azure regions."""
    routes = parse_routes(
        json.dumps({"routes": {"r": {"target": {"type": "bigquery_job", **VALID, "location": location}}}}), "r.yaml"
    )
    assert routes["r"].target.location == location  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"project": "Bad_Project"}, "field 'target.project': must be a project ID"),
        ({"location": "mars"}, "field 'target.location': must be a BigQuery location"),
        ({"configuration": {}}, "configuration: JobConfiguration needs one of copy, extract, load, query"),
        (
            {"configuration": {**QUERY, "copy": {"sourceTables": [TABLE], "destinationTable": TABLE}}},
            "configuration: copy and query are both set; JobConfiguration takes only one of copy, extract, load, query",
        ),
        (
            {"configuration": {"query": "SELECT 1"}},
            'configuration.query: expected an object (JobConfigurationQuery), got str "SELECT 1"',
        ),
        ({"configuration": {"query": {"query": " "}}}, "configuration.query.query: the SQL text is empty"),
        ({"configuration": {"query": {"query": ""}}}, "configuration.query.query: required by JobConfigurationQuery"),
        ({"configuration": {"query": {"query": "\n\t  \n"}}}, "configuration.query.query: the SQL text is empty"),
        (
            {"configuration": {"query": {**QUERY["query"], "useLegacySql": True}}},
            "legacy SQL takes no query parameters",
        ),
        (
            {"configuration": {"query": {"query": "  #legacySQL\nSELECT 1"}}},  # the dialect prefix, in the text
            "legacy SQL takes no query parameters",
        ),
        (
            {
                "configuration": {
                    "query": {
                        **QUERY["query"],
                        "queryParameters": [
                            {"name": "x", "parameterType": {"type": "STRING"}, "parameterValue": {"value": "a"}},
                            {"name": "x", "parameterType": {"type": "STRING"}, "parameterValue": {"value": "b"}},
                        ],
                    }
                }
            },
            "configuration.query.queryParameters: 'x' twice; a name is unique in a query",
        ),
        (
            {"configuration": {"query": {**QUERY["query"], "parameterMode": "POSITIONAL"}}},
            "parameterMode must be NAMED",
        ),
        (
            {
                "configuration": {
                    "query": {
                        **QUERY["query"],
                        "queryParameters": [{"parameterType": {"type": "INT64"}, "parameterValue": {"value": "1"}}],
                    }
                }
            },
            "a positional parameter",
        ),
        (
            {
                "configuration": {
                    "query": {
                        **QUERY["query"],
                        "queryParameters": [
                            {
                                "name": "schedule_time",
                                "parameterType": {"type": "STRING"},
                                "parameterValue": {"value": "x"},
                            }
                        ],
                    }
                }
            },
            "'schedule_time' is set by runonce",
        ),
        (
            {
                "configuration": {
                    "query": {
                        **QUERY["query"],
                        "queryParameters": [
                            {"name": "RUN_ID", "parameterType": {"type": "STRING"}, "parameterValue": {"value": "x"}}
                        ],
                    }
                }
            },
            "'RUN_ID' is set by runonce",  # BigQuery's parameter names ignore letter case
        ),
        ({"configuration": {**QUERY, "dryRun": True}}, "dryRun creates no job"),
        ({"configuration": {**QUERY, "labels": {"runonce-run-id": "x"}}}, "label 'runonce-run-id' is set by runonce"),
        ({"configuration": {**QUERY, "labels": {"Team": "x"}}}, "label key 'Team'"),
        ({"configuration": ["query"]}, "field 'target.configuration': Input should be a valid dictionary"),
        ({"location": None}, "field 'target.location'"),
    ],
)
def test_each_mistake_in_a_route_is_named(change: dict[str, Any], expected: str) -> None:
    target = {key: value for key, value in {**VALID, **change}.items() if value is not None}
    message = error_of(target)
    assert message.startswith("routes file r.yaml: route 'r': ")
    assert expected in message
    assert len(message.splitlines()) == 1


def test_load_extract_and_copy_jobs_are_accepted() -> None:
    table = {"projectId": PROJECT, "datasetId": "sales", "tableId": "daily"}
    jobs = {
        "load": {"sourceUris": ["gs://bucket/daily-*.csv"], "destinationTable": table},
        "extract": {"sourceTable": table, "destinationUris": ["gs://bucket/daily-*.csv"]},
        "copy": {"sourceTables": [table], "destinationTable": {**table, "tableId": "daily_copy"}},
    }
    for kind, job in jobs.items():
        routes = parse_routes(
            json.dumps({"routes": {"r": {"target": {**VALID, "type": "bigquery_job", "configuration": {kind: job}}}}}),
            "r.yaml",
        )
        assert routes["r"].target.configuration[kind] == job


# --- what jobs.insert receives ------------------------------------------------------------------


def test_the_job_id_is_the_run_id_and_stays_a_valid_bigquery_id() -> None:
    run_id = "a" * 64
    assert job_id_for(run_id) == f"runonce_{run_id}"
    odd = job_id_for("not a run id / with spaces")
    assert odd.startswith("runonce_") and len(odd) == 72 and odd == job_id_for("not a run id / with spaces")


async def test_a_query_job_carries_the_id_label_and_named_parameters(bigquery, http, metadata) -> None:
    configuration = {
        "query": {
            **QUERY["query"],
            "queryParameters": [
                {"name": "region", "parameterType": {"type": "STRING"}, "parameterValue": {"value": "eu"}}
            ],
        },
        "labels": {"team": "data"},
    }
    target = target_for(bigquery, http, metadata, configuration, location="EU")
    request = new_request()
    resource = await target.dispatch(request)
    assert resource == f"{PROJECT}:EU.runonce_{request.run_id}"
    [created] = [c for c in bigquery.created if c.token == request.run_id]
    body = created.data["body"]
    assert body["jobReference"] == {"projectId": PROJECT, "jobId": f"runonce_{request.run_id}", "location": "EU"}
    assert body["configuration"]["labels"] == {"team": "data", "runonce-run-id": request.run_id[:63]}
    query = body["configuration"]["query"]
    assert query["useLegacySql"] is False and query["parameterMode"] == "NAMED"
    assert query["queryParameters"] == [
        {"name": "region", "parameterType": {"type": "STRING"}, "parameterValue": {"value": "eu"}},
        {"name": "run_id", "parameterType": {"type": "STRING"}, "parameterValue": {"value": request.run_id}},
        {
            "name": "schedule_time",
            "parameterType": {"type": "TIMESTAMP"},
            "parameterValue": {"value": "2026-10-16T03:00:00Z"},
        },
    ]
    # The route's configuration is a template: one run's additions never leak into the next.
    assert target.config.configuration == configuration
    assert len(configuration["query"]["queryParameters"]) == 1


async def test_a_run_without_a_schedule_time_passes_a_null_timestamp(bigquery, http, metadata) -> None:
    target = target_for(bigquery, http, metadata)
    request = new_request(schedule_time=None)
    await target.dispatch(request)
    [created] = [c for c in bigquery.created if c.token == request.run_id]
    [parameter] = [
        p for p in created.data["body"]["configuration"]["query"]["queryParameters"] if p["name"] == "schedule_time"
    ]
    assert parameter == {"name": "schedule_time", "parameterType": {"type": "TIMESTAMP"}, "parameterValue": {}}


async def test_a_load_job_gets_the_label_and_no_parameters(bigquery, http, metadata) -> None:
    load = {
        "load": {
            "sourceUris": ["gs://bucket/day/*.csv"],
            "destinationTable": {"projectId": PROJECT, "datasetId": "raw", "tableId": "events"},
        }
    }
    target = target_for(bigquery, http, metadata, load)
    request = new_request()
    await target.dispatch(request)
    [created] = [c for c in bigquery.created if c.token == request.run_id[:63]]
    assert created.data["body"]["configuration"]["load"] == load["load"]
    assert "query" not in created.data["body"]["configuration"]


async def test_a_delivery_body_is_refused_before_anything_is_sent(bigquery, http, metadata) -> None:
    inserts = bigquery.calls[INSERT]
    with pytest.raises(TargetFailed, match="takes no delivery body"):
        await target_for(bigquery, http, metadata).dispatch(new_request(payload={"day": "2026-10-16"}))
    assert bigquery.calls[INSERT] == inserts


# --- dedupe, reconciliation, state --------------------------------------------------------------


async def test_inserting_a_run_again_answers_its_existing_job(bigquery, http, metadata) -> None:
    target = target_for(bigquery, http, metadata)
    request = new_request()
    first = await target.dispatch(request)
    gets = bigquery.calls[GET]
    again = await target.dispatch(request)
    assert again == first
    assert bigquery.calls[GET] == gets + 1  # the 409 was followed by jobs.get
    assert bigquery.created_for(request.run_id) == [first]


async def test_reconcile_finds_the_runs_job_by_its_id_and_nothing_for_another_run(bigquery, http, metadata) -> None:
    target = target_for(bigquery, http, metadata)
    bigquery.add_unrelated_jobs(PROJECT, 5)
    request = new_request()
    assert await target.reconcile(request) is None
    created = await target.dispatch(request)
    assert await target.reconcile(request) == created


async def test_reconcile_looks_in_the_routes_location(bigquery, http, metadata) -> None:
    """A job in EU is not found by a lookup in US: the location is part of the lookup."""
    request = new_request()
    await target_for(bigquery, http, metadata, location="EU").dispatch(request)
    assert await target_for(bigquery, http, metadata, location="US").reconcile(request) is None
    assert await target_for(bigquery, http, metadata, location="EU").reconcile(request) is not None


async def test_is_running_until_the_job_is_done(bigquery, http, metadata) -> None:
    target = target_for(bigquery, http, metadata, location="EU")
    resource = await target.dispatch(new_request())
    assert parse_resource(resource) == (PROJECT, "EU", resource.rsplit(".", 1)[1])
    assert await target.is_running(resource) is True
    bigquery.finish(resource)
    assert await target.is_running(resource) is False


async def test_a_job_that_no_longer_exists_is_not_running(bigquery, http, metadata) -> None:
    target = target_for(bigquery, http, metadata)
    resource = await target.dispatch(new_request())
    bigquery.fail(GET, "NOT_FOUND", "gone")
    assert await target.is_running(resource) is False


@pytest.mark.parametrize("code", ["PERMISSION_DENIED", "UNAVAILABLE"])
async def test_is_running_that_cannot_read_the_state_is_unknown(bigquery, http, metadata, code: str) -> None:
    target = target_for(bigquery, http, metadata)
    resource = await target.dispatch(new_request())
    bigquery.fail(GET, code, "no")
    with pytest.raises(TargetOutcomeUnknown, match="cannot read the state"):
        await target.is_running(resource)


async def test_a_domain_scoped_project_parses_back() -> None:
    assert parse_resource("example.com:analytics:US.runonce_ab") == ("example.com:analytics", "US", "runonce_ab")


# --- each answer of jobs.insert -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "http_status", "outcome"),
    [
        ("RESOURCE_EXHAUSTED", 403, TargetThrottled),  # BigQuery's rateLimitExceeded is a 403
        ("RESOURCE_EXHAUSTED", 429, TargetThrottled),
        ("INVALID_ARGUMENT", None, TargetFailed),
        ("PERMISSION_DENIED", None, TargetFailed),
        ("NOT_FOUND", None, TargetFailed),
        ("UNAUTHENTICATED", None, TargetFailed),
        ("INTERNAL", None, TargetOutcomeUnknown),  # backendError: the job may exist
        ("UNAVAILABLE", None, TargetOutcomeUnknown),
        ("DEADLINE_EXCEEDED", None, TargetOutcomeUnknown),
    ],
)
async def test_each_answer_of_insert_is_its_outcome(bigquery, http, metadata, code: str, http_status, outcome) -> None:
    bigquery.fail(
        INSERT, code, f"the API says {code}", http_status=http_status, retry_after="9" if http_status else None
    )
    request = new_request()
    with pytest.raises(outcome) as caught:
        await target_for(bigquery, http, metadata).dispatch(request)
    assert type(caught.value) is outcome
    assert f"the API says {code}" in caught.value.message
    if outcome is TargetThrottled:
        assert caught.value.retry_after == 9
    assert bigquery.created_for(request.run_id) == []


async def test_quota_exceeded_is_a_refusal_not_a_throttle(bigquery, http, metadata) -> None:
    """Only rateLimitExceeded asks for a slower retry; a 403 accessDenied is a refusal."""
    bigquery.fail(
        INSERT,
        "PERMISSION_DENIED",
        "Access Denied: Project runonce-test: User does not have bigquery.jobs.create permission",
    )
    with pytest.raises(TargetFailed, match=r"bigquery.jobs.create"):
        await target_for(bigquery, http, metadata).dispatch(new_request())


async def test_an_answer_lost_after_the_insert_is_unknown_and_the_retry_is_the_same_job(
    bigquery, http, metadata
) -> None:
    target = target_for(bigquery, http, metadata)
    request = new_request()
    bigquery.drop_after_create(INSERT)
    with pytest.raises(TargetOutcomeUnknown):
        await target.dispatch(request)
    [created] = bigquery.created_for(request.run_id)
    assert await target.dispatch(request) == created  # 409 -> jobs.get
    assert bigquery.created_for(request.run_id) == [created]


async def test_an_endpoint_that_refuses_connections_is_a_failure_nothing_sent(http, metadata) -> None:
    from tests.support.procs import free_port

    config = BigQueryJobTargetConfig(type="bigquery_job", project=PROJECT, location="US", configuration=QUERY)
    target = BigQueryJobTarget(config, http, MetadataTokenAuth(metadata.host), f"http://127.0.0.1:{free_port()}")
    with pytest.raises(TargetFailed, match="nothing was sent"):
        await target.dispatch(new_request())


def test_the_registry_says_it_reconciles_and_reads_state() -> None:
    from runonce.targets import TARGET_TYPES

    entry = TARGET_TYPES["bigquery_job"]
    assert entry.can_reconcile and entry.reads_state
    assert entry.endpoint == "bigquery" and entry.resource_field == "project"
    assert [(g.role, g.on) for g in entry.grants] == [("roles/bigquery.jobUser", "project")]
