"""The web layer: routers that parse a request, call the runner, and render the answer.

main.py        create_app: wiring only
server.py      the uvicorn server `runonce serve` runs (SIGTERM drain)
access_log.py  the access-log middleware: one line per request
deps.py        what endpoints get through `Depends`: objects made once, kept on `app.state`
answers.py     every error answer (status, body, headers) and the exception handlers
deliveries.py  POST /v1/routes/{route}:run
missed.py      the audit route and POST /v1/routes/{route}:backfill
runs.py        GET  /v1/runs/{run_id}
health.py      GET  /healthz, /readyz, /metrics
"""
