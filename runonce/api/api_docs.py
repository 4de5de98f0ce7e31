"""The API description's pages, `/docs` (Swagger UI) and `/redoc`, with their scripts and styles
served by runonce itself from the `fastapi-offline` package's copy: the pages load nothing from a
CDN, so they work where the service cannot reach the internet (or should not make a browser do so).

`RUNONCE_API_DOCS=false` leaves all of it out, `/openapi.json` included (`create_app`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_PATH = "/docs-assets"
"""Where the pages' scripts, stylesheet and icon are served."""


def _assets_dir() -> Path:
    """fastapi-offline's static folder, found without importing the package (it builds an app)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the fastapi-offline package is missing: it holds the API pages' assets")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def serve(app: FastAPI) -> None:
    """Add `/docs`, `/docs/oauth2-redirect`, `/redoc` and the assets they load."""
    assert app.openapi_url is not None
    openapi_url, title = app.openapi_url, app.title
    app.mount(ASSETS_PATH, StaticFiles(directory=_assets_dir()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{title} - Swagger UI",
            oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )
