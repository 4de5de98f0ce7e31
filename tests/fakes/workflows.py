"""Fake Workflows Executions API (gRPC `google.cloud.workflows.executions.v1.Executions`).

A `grpc.aio` server built from the client package's own proto-plus types (their `serialize` /
`deserialize`), in a thread with its own event loop. Clients reach it through a TCP relay, so that
a test can drop every connection mid-call (a lost response) like a network would.

It checks what Google documents for these calls (names against the patterns of
`workflowexecutions.v1.json`, labels, the argument's JSON and size, the bearer token) and, like the
real API, returns labels and argument from `ListExecutions` only with `view=FULL`.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from typing import Any

import grpc
from google.cloud.workflows.executions_v1.types import executions as types
from google.protobuf import any_pb2, duration_pb2, timestamp_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from tests.support.discovery import load_document, output_only

from .google_api import FakeGoogleApi, Step
from .metadata import FakeMetadataServer

SERVICE = "google.cloud.workflows.executions.v1.Executions"
CREATE, LIST, GET = "CreateExecution", "ListExecutions", "GetExecution"
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
FILTER_TERM = re.compile(r'^labels\.([a-z][a-z0-9_-]{0,62})="([a-z0-9_-]{0,63})"$')


class _Abort(Exception):
    def __init__(self, code: str, message: str, retry_delay: float | None = None):
        super().__init__(message)
        self.code, self.message, self.retry_delay = code, message, retry_delay


def _output_only() -> tuple[str, ...]:
    """The Execution fields the discovery document marks output-only, as proto field names (those
    the client's proto has: a request cannot carry the others at all)."""
    properties = load_document("workflowexecutions.v1")["schemas"]["Execution"]["properties"]
    names = (re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower() for name, spec in properties.items() if output_only(spec))
    return tuple(name for name in names if name in types.Execution.meta.fields)


def _patterns() -> dict[str, str]:
    doc = load_document("workflowexecutions.v1")
    methods = doc["resources"]["projects"]["resources"]["locations"]["resources"]["workflows"]["resources"][
        "executions"
    ]["methods"]
    return {
        CREATE: methods["create"]["parameters"]["parent"]["pattern"],
        LIST: methods["list"]["parameters"]["parent"]["pattern"],
        GET: methods["get"]["parameters"]["name"]["pattern"],
    }


class FakeWorkflows(FakeGoogleApi):
    def __init__(self, metadata: FakeMetadataServer):
        super().__init__()
        self.metadata = metadata
        self.token_field = "idempotency_key"
        self.patterns = _patterns()
        self.output_only = _output_only()
        self.workflows: set[str] = set()
        self.executions: list[types.Execution] = []  # oldest first
        self.list_views: list[str] = []
        self.list_filters: list[str] = []
        self._connections: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-workflows", daemon=True)
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def add_workflow(self, name: str) -> None:
        with self.lock:
            self.workflows.add(name)

    def add_unrelated_executions(self, workflow: str, count: int) -> None:
        for _ in range(count):
            token = uuid.uuid4().hex + uuid.uuid4().hex
            self._store(
                workflow,
                types.Execution(argument=json.dumps({"idempotency_key": token}), labels={"runonce-run-id": token[:63]}),
            )

    def finish(self, name: str, state: str = "SUCCEEDED") -> None:
        """The execution ends (SUCCEEDED, FAILED, CANCELLED), or moves to any other `State`."""
        with self.lock:
            [execution] = [e for e in self.executions if e.name == name]
            execution.state = types.Execution.State[state]
            if state in ("SUCCEEDED", "FAILED", "CANCELLED"):
                end = timestamp_pb2.Timestamp()
                end.GetCurrentTime()
                execution.end_time = end

    def close(self) -> None:
        self.release()
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # --- server and relay ---
    async def _start(self) -> int:
        self._server = grpc.aio.server()
        handlers = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                CREATE: grpc.unary_unary_rpc_method_handler(
                    self._create, types.CreateExecutionRequest.deserialize, types.Execution.serialize
                ),
                LIST: grpc.unary_unary_rpc_method_handler(
                    self._list, types.ListExecutionsRequest.deserialize, types.ListExecutionsResponse.serialize
                ),
                GET: grpc.unary_unary_rpc_method_handler(
                    self._get, types.GetExecutionRequest.deserialize, types.Execution.serialize
                ),
            },
        )
        self._server.add_generic_rpc_handlers((handlers,))
        self._backend_port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        self._relay = await asyncio.start_server(self._relay_connection, "127.0.0.1", 0)
        return self._relay.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        self._relay.close()
        self._drop_connections()
        await self._server.stop(0)

    async def _relay_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._backend_port)
        self._connections |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._connections -= {writer, up_writer}

    def _drop_connections(self) -> None:
        for writer in list(self._connections):
            writer.transport.abort()  # RST: the client's call dies with its request sent
        self._connections.clear()

    # --- handlers ---
    async def _serve(self, method: str, context: grpc.aio.ServicerContext, handle) -> Any:
        metadata = dict(context.invocation_metadata() or ())
        if not self.metadata.valid_access_token(metadata.get("authorization")):
            self.violation(f"{method}: no valid access token from the metadata server")
            await self._abort(context, _Abort("UNAUTHENTICATED", "Request had invalid authentication credentials."))
        step: Step | None = self.next_step(method)
        if step is not None and step.kind == "fail":
            await self._abort(context, _Abort(step.code, step.message, step.retry_delay))
        if method == CREATE and self.create_delay:
            await asyncio.sleep(self.create_delay)
        try:
            answer = handle()
        except _Abort as exc:
            await self._abort(context, exc)
        if step is None:
            return answer
        if step.kind == "drop":
            self._drop_connections()
            await asyncio.sleep(1)
            return answer
        if step.kind == "hang":
            await asyncio.sleep(step.seconds)
            return answer
        if step.kind == "hold":
            await asyncio.to_thread(self.wait_held, 60)
            self._drop_connections()
            return answer
        if step.kind == "fail_after":
            await self._abort(context, _Abort(step.code, step.message))
        raise AssertionError(step.kind)

    async def _abort(self, context: grpc.aio.ServicerContext, exc: _Abort) -> None:
        """Abort like Google's APIs: a google.rpc.Status with ErrorInfo (and RetryInfo) details."""
        details = []
        info = any_pb2.Any()
        info.Pack(error_details_pb2.ErrorInfo(reason=exc.code, domain="workflowexecutions.googleapis.com"))
        details.append(info)
        if exc.retry_delay is not None:
            retry = any_pb2.Any()
            retry.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=int(exc.retry_delay))))
            details.append(retry)
        status = status_pb2.Status(code=getattr(code_pb2, exc.code), message=exc.message, details=details)
        await context.abort_with_status(rpc_status.to_status(status))

    def _check_name(self, method: str, value: str) -> None:
        if not re.match(self.patterns[method], value):
            self.violation(f"{method}: {value!r} does not match {self.patterns[method]}")
            raise _Abort("INVALID_ARGUMENT", f"invalid resource name {value!r}")

    def _workflow(self, name: str) -> None:
        with self.lock:
            if name not in self.workflows:
                raise _Abort("NOT_FOUND", f"Resource '{name}' was not found")

    async def _create(
        self, request: types.CreateExecutionRequest, context: grpc.aio.ServicerContext
    ) -> types.Execution:
        def handle() -> types.Execution:
            self._check_name(CREATE, request.parent)
            self._workflow(request.parent)
            execution = request.execution
            for field in self.output_only:
                if field in execution and getattr(execution, field):
                    self.violation(f"{CREATE}: output-only field {field} set in the request")
            if len(execution.argument.encode()) > 32 * 1024:
                raise _Abort("INVALID_ARGUMENT", "argument exceeds 32KB")
            try:
                argument = json.loads(execution.argument or "null")
            except ValueError:
                self.violation(f"{CREATE}: argument is not JSON")
                raise _Abort("INVALID_ARGUMENT", "argument is not valid JSON") from None
            if argument is not None and not isinstance(argument, dict):
                raise _Abort("INVALID_ARGUMENT", "argument must be a JSON object")
            if len(execution.labels) > 64:
                raise _Abort("INVALID_ARGUMENT", "at most 64 labels")
            for key, value in execution.labels.items():
                if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
                    self.violation(f"{CREATE}: invalid label {key}={value}")
                    raise _Abort("INVALID_ARGUMENT", f"invalid label {key}={value}")
            stored = self._store(request.parent, execution)
            self.record_created(CREATE, stored.name, (argument or {}).get(self.token_field), {"execution": stored})
            return stored

        return await self._serve(CREATE, context, handle)

    def _store(self, workflow: str, execution: types.Execution) -> types.Execution:
        now = timestamp_pb2.Timestamp()
        now.GetCurrentTime()
        stored = types.Execution(
            name=f"{workflow}/executions/{uuid.uuid4()}",
            argument=execution.argument,
            labels=dict(execution.labels),
            call_log_level=execution.call_log_level,
            state=types.Execution.State.ACTIVE,
            start_time=now,
            workflow_revision_id="000001-abc",
        )
        with self.lock:
            self.executions.append(stored)
        return stored

    async def _list(
        self, request: types.ListExecutionsRequest, context: grpc.aio.ServicerContext
    ) -> types.ListExecutionsResponse:
        def handle() -> types.ListExecutionsResponse:
            self._check_name(LIST, request.parent)
            self._workflow(request.parent)
            with self.lock:
                self.list_views.append(types.ExecutionView(request.view).name)
                self.list_filters.append(request.filter)
                matching = [e for e in reversed(self.executions) if e.name.startswith(request.parent + "/executions/")]
            for term in [t.strip() for t in request.filter.split(" AND ")] if request.filter else []:
                match = FILTER_TERM.match(term)
                if not match:
                    raise _Abort("INVALID_ARGUMENT", f"invalid filter {request.filter!r}")
                matching = [e for e in matching if e.labels.get(match.group(1)) == match.group(2)]
            full = request.view == types.ExecutionView.FULL
            size = min(request.page_size or 100, 100 if full else 1000)
            start = int(request.page_token or 0)
            page = [self._view(e, full) for e in matching[start : start + size]]
            token = str(start + size) if start + size < len(matching) else ""
            return types.ListExecutionsResponse(executions=page, next_page_token=token)

        return await self._serve(LIST, context, handle)

    @staticmethod
    def _view(execution: types.Execution, full: bool) -> types.Execution:
        if full:
            return execution
        return types.Execution(
            name=execution.name,
            start_time=execution.start_time,
            state=execution.state,
            workflow_revision_id=execution.workflow_revision_id,
        )

    async def _get(self, request: types.GetExecutionRequest, context: grpc.aio.ServicerContext) -> types.Execution:
        def handle() -> types.Execution:
            self._check_name(GET, request.name)
            with self.lock:
                for execution in self.executions:
                    if execution.name == request.name:
                        return execution
            raise _Abort("NOT_FOUND", f"Execution {request.name} not found")

        return await self._serve(GET, context, handle)
