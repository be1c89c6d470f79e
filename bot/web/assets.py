"""The pages' stylesheet, live-update script and icon, served from the package with the same
security headers as the pages."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, Response

from bot.core.errors import BeamError
from bot.web.rendering import WebRoute

MEDIA_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Read once: the files ship with the package and change only with a new release.
ASSETS = {
    item.name: item.read_bytes()
    for item in files("bot.web").joinpath("static").iterdir()
    if item.name.endswith(tuple(MEDIA_TYPES))
}

router = APIRouter(route_class=WebRoute, include_in_schema=False)


@router.get("/static/{name}")
def asset(name: str) -> Response:
    body = ASSETS.get(name)
    if body is None:
        raise BeamError("BEM-706", f"no file named {name!r}")
    media_type = MEDIA_TYPES["." + name.rsplit(".", 1)[-1]]
    return Response(body, media_type=media_type, headers={"Cache-Control": "max-age=300"})


@router.get("/favicon.ico")
def favicon() -> Response:
    """The icon, also where browsers and tools look without reading a page's ``<link>``: a
    404 there is a console error on every page."""
    return asset("favicon.svg")
