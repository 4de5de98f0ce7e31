"""The API description's pages: served with their assets from the package (nothing from a CDN), and
all of it off with RUNONCE_API_DOCS=false."""

from __future__ import annotations

import re

import httpx
import pytest

from runonce.api.main import create_app
from runonce.settings import Settings, load_settings
from runonce.stores.memory import MemoryStore

ROUTES = '{"routes": {"demo": {"target": {"type": "log"}}}}'
PAGES = ("/docs", "/redoc")


async def _client(**settings: object) -> httpx.AsyncClient:
    app = create_app(Settings(routes=ROUTES, auth="none", **settings), store=MemoryStore())  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce")


def _asset_urls(html: str) -> list[str]:
    """Every script, stylesheet and icon a page loads."""
    return re.findall(r"""<(?:script|link)\b[^>]*\b(?:src|href)=["']([^"']+)["']""", html)


@pytest.mark.parametrize("page", PAGES)
async def test_each_page_loads_only_assets_that_runonce_serves(page: str) -> None:
    async with await _client() as client:
        answer = await client.get(page)
        assert answer.status_code == 200 and "text/html" in answer.headers["content-type"]
        urls = _asset_urls(answer.text)
        assert len(urls) >= 2, answer.text  # the script and the stylesheet or icon
        assert [url for url in urls if not url.startswith("/")] == []  # no CDN, no other host
        assert "fonts.googleapis" not in answer.text
        for url in urls:
            asset = await client.get(url)
            assert asset.status_code == 200 and len(asset.content) > 1000, url
        spec = await client.get("/openapi.json")
        assert spec.status_code == 200 and "/v1/routes/{route}:run" in spec.json()["paths"]


async def test_the_swagger_page_names_the_spec_it_shows() -> None:
    async with await _client() as client:
        html = (await client.get("/docs")).text
        assert "'/openapi.json'" in html or '"/openapi.json"' in html


async def test_api_docs_off_answers_404_everywhere_it_served() -> None:
    async with await _client(api_docs=False) as client:
        for path in (*PAGES, "/openapi.json", "/docs/oauth2-redirect", "/docs-assets/swagger-ui.css"):
            answer = await client.get(path)
            assert answer.status_code == 404, path
            assert answer.json()["status"] == "not_found", path
        assert (await client.get("/healthz")).status_code == 200  # the service itself is unchanged


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("0", False), ("true", True)])
def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("RUNONCE_API_DOCS", value)
    assert load_settings().api_docs is expected
