"""The web layer: routers that parse a request, call the protocol, and render the answer.

    deps.py        what endpoints get through `Depends`: objects made once, kept on `app.state`
    answers.py     every error answer (status, body, headers) and the exception handlers
    deliveries.py  POST /v1/routes/{route}:run
    runs.py        GET  /v1/runs/{run_id}
    health.py      GET  /healthz, /readyz, /metrics

`app.main.create_app` wires them together.
"""
