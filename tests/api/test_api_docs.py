"""`/api/docs/` (Swagger UI) and `/api/redoc/` work without a network: their scripts are
static files of this project (drf-spectacular-sidecar), never a CDN."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.staticfiles import finders


@pytest.mark.parametrize(
    ("path", "bundle"),
    [
        ("/api/docs/", "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"),
        ("/api/redoc/", "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"),
    ],
)
def test_the_api_documentation_pages_load_their_scripts_from_this_server(client: Any, path: str, bundle: str) -> None:
    response = client.get(path)

    assert response.status_code == 200
    page = response.content.decode()
    assert f"/static/{bundle}" in page and "/api/schema/" in page
    assert not re.search(r"""(src|href)=["']https?://""", page), "the page loads something from another host"
    assert finders.find(bundle) is not None
