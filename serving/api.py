"""The JSON API and the web page of ``crossmodal serve`` (FastAPI; see docs/serving.md for the endpoints).

Every input a user can get wrong is answered with a 4xx and ``{"error": message, "reason": code}``, never a
crash: the app keeps answering. URLs and request heads are bounded (serving/heads.py); bodies are read no
further than their limit and JSON is parsed within a depth bound (serving/bodies.py); a server bound off the
loopback interface requires its token, one without a token answers only requests addressed to this machine
(serving/access.py); item paths are shown relative to the gallery root. The OpenAPI description
(``--api-docs``) lists every answer an endpoint gives (serving/api_schema.py); ``OPTIONS`` and a 405 name the
methods a path really answers. Model inference runs in FastAPI's thread pool (the endpoints are plain
functions), so concurrent requests queue there instead of blocking the event loop.
"""

from __future__ import annotations

import io
import os
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from PIL import Image
from starlette.exceptions import HTTPException

from data_recipes.validate import DEFAULT_MAX_PIXELS, ImageRejected
from serving import api_schema as schema
from serving.access import PUBLIC_PREFIXES, TOKEN_COOKIE, TOKEN_HEADER, Access, HostCheck
from serving.bodies import MULTIPART_OVERHEAD, ApiError, bounded_form, json_body
from serving.embed import QueryError
from serving.heads import head_refusal
from serving.search import MAX_K, Hit, Searcher, UnknownItem

STATIC_DIR = Path(str(resources.files("serving") / "static"))


@dataclass(frozen=True)
class ServeSettings:
    #: largest image upload accepted (413 above it)
    max_upload_bytes: int = 10 * 1024 * 1024
    #: largest decoded image (pixels), as the pipeline's decompression-bomb check
    max_image_pixels: int = DEFAULT_MAX_PIXELS
    #: largest JSON query body (a text or a vector query; 413 above it)
    max_query_bytes: int = 1024 * 1024
    #: the token every route but the static files requires (serving/access.py)
    access: Access = Access(None)
    #: the Host names answered (serving/access.py: always localhost and loopback addresses)
    hosts: HostCheck = HostCheck(frozenset())
    #: item paths as stored (absolute); by default relative to the gallery root
    absolute_paths: bool = False
    #: serve /openapi.json and a page listing the endpoints (/docs, from the package; no CDN)
    api_docs: bool = False


class PathDisplay:
    """Item paths as the API shows them: relative to the gallery root (the deepest folder holding every
    item), so a server does not tell its clients where its files live; as stored with ``absolute``."""

    def __init__(self, paths: list[str], absolute: bool) -> None:
        self.absolute = absolute
        folders = [os.path.dirname(p) for p in paths if os.path.isabs(p)]
        self.root = os.path.commonpath(folders) if folders else None

    def __call__(self, path: str) -> str:
        if self.absolute or self.root is None or not os.path.isabs(path):
            return path
        return os.path.relpath(path, self.root)


def create_app(searcher: Searcher, settings: ServeSettings | None = None) -> FastAPI:
    settings = settings or ServeSettings()
    app = FastAPI(
        title="crossmodal search",
        version="1",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json" if settings.api_docs else None,
    )
    display = PathDisplay(searcher.index.items["path"].astype(str).tolist(), settings.absolute_paths)

    def error(status: int, reason: str, message: str) -> JSONResponse:
        return JSONResponse(status_code=status, content={"error": message, "reason": reason})

    def results(query: dict[str, Any], hits: list[Hit]) -> dict[str, Any]:
        return {"query": query, "results": [{**hit.as_dict(), "path": display(hit.path)} for hit in hits]}

    @app.middleware("http")
    async def checks(request: Request, call_next):  # noqa: ANN001, ANN202 - Starlette's signature
        """Before any route: the head's size, the ``Host``, the token; then ``OPTIONS`` is answered here."""
        scope = request.scope
        query = scope["query_string"]
        target = len(scope.get("raw_path") or scope["path"].encode()) + (len(query) + 1 if query else 0)
        too_long = head_refusal(target, sum(len(name) + len(value) + 4 for name, value in scope["headers"]))
        if too_long is not None:  # as when uvicorn's parser stops reading it (serving/heads.py)
            return error(too_long.status, too_long.reason, too_long.message)
        host = request.headers.get("host")
        if not settings.hosts.allows(host):
            # before anything else, static files included: a rebound page learns nothing, not even the page
            return error(403, "host_not_allowed", settings.hosts.refusal(host or ""))
        access = settings.access
        needs_token = access.token is not None and not request.url.path.startswith(PUBLIC_PREFIXES)
        in_query = request.query_params.get("token")
        if needs_token:
            authorization = request.headers.get("authorization", "")
            bearer = authorization[7:] if authorization.lower().startswith("bearer ") else None
            presented = [bearer, request.headers.get(TOKEN_HEADER), in_query, request.cookies.get(TOKEN_COOKIE)]
            if not access.allows(presented):
                return error(
                    401,
                    "unauthorized",
                    "this server needs its token: open the address crossmodal serve printed (…/?token=…), or "
                    "send 'Authorization: Bearer TOKEN'",
                )
        if request.method == "OPTIONS":
            return options(request.url.path)
        response = await call_next(request)
        if needs_token and in_query is not None and request.url.path == "/":
            # the page's own requests (fetch, <img>) then carry the token without it in every URL
            response.set_cookie(TOKEN_COOKIE, access.token, httponly=True, samesite="strict")
        return response

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error(exc.status, exc.reason, exc.message)

    @app.exception_handler(QueryError)
    async def query_error(_: Request, exc: QueryError) -> JSONResponse:
        return error(400, exc.reason, str(exc))

    @app.exception_handler(UnknownItem)
    async def unknown_item(_: Request, exc: UnknownItem) -> JSONResponse:
        return error(404, "unknown_item", exc.args[0])

    @app.exception_handler(ImageRejected)
    async def bad_image(_: Request, exc: ImageRejected) -> JSONResponse:
        return error(422, exc.reason, f"the upload is not a usable image: {exc.detail}")

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(_: Request, exc: RequestValidationError) -> JSONResponse:
        refusal = schema.parameter_refusal(exc.errors())
        return error(refusal.status, refusal.reason, refusal.message)

    def options(path: str) -> Response:
        allowed = schema.allowed_methods(app.routes, path)
        if not allowed:
            return error(404, "not_found", f"nothing is served at {path[:100]!r}")
        return Response(status_code=204, headers={"Allow": ", ".join(allowed)})

    @app.exception_handler(HTTPException)
    async def no_such_route(request: Request, exc: HTTPException) -> JSONResponse:
        """Starlette's answers (no route, a method the route does not take) in the API's words; a 405 names
        every method of the path (Starlette's named only the first route's)."""
        path = request.url.path
        allowed = schema.allowed_methods(app.routes, path)
        if exc.status_code == 405 and allowed:
            methods = ", ".join(allowed)
            answer = error(405, "method_not_allowed", f"{path[:100]} answers {methods}, not {request.method}")
            answer.headers["Allow"] = methods
            return answer
        return error(404, "not_found", f"nothing is served at {path[:100]!r}")

    # what each endpoint answers, as its OpenAPI description says (serving/api_schema.py); response_model=None:
    # the answers are built here, not re-validated by FastAPI
    @app.get("/api/health", response_model=None, responses=schema.answer(schema.HEALTH, "the index, the model"))
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            **searcher.summary(),
            "max_upload_bytes": settings.max_upload_bytes,
            "max_query_bytes": settings.max_query_bytes,
            "paths": "absolute" if settings.absolute_paths else "relative to the gallery root",
        }

    found = schema.answer(schema.RESULTS, "the k items nearest the query, best first")
    by_id = schema.refusals({400: schema.ITEM, 404: ("unknown_item",)})

    @app.get(
        "/api/search/text",
        response_model=None,
        responses={**found, **schema.refusals({400: schema.TEXT + schema.OPTIONS})},
    )
    def search_text(
        q: str = Query(
            ...,
            min_length=schema.QUERY_TEXT_MIN_LENGTH,
            pattern=schema.QUERY_TEXT_PATTERN,
            description="the query text, not whitespace alone (long texts: POST the same as JSON)",
        ),
        k: int = Query(10, ge=1, le=MAX_K, description="how many results"),
        against: Literal["image", "text"] = Query("image", description="rank the items' images or their texts"),
    ) -> dict[str, Any]:
        return results({"text": q, "k": k, "against": against}, searcher.by_text(q, k, against))

    @app.post(
        "/api/search/text",
        response_model=None,
        responses={
            **found,
            **schema.refusals({400: schema.JSON_BODY + schema.TEXT + schema.OPTIONS, 413: TOO_LARGE}),
        },
        openapi_extra=schema.json_request(schema.TEXT_BODY),
    )
    async def search_text_body(request: Request) -> dict[str, Any]:
        """``{"q": TEXT, "k": 10, "against": "image"}``: a query too long for a URL (a whole article)."""
        body = await json_body(request, settings.max_query_bytes)
        text, k, against = body.get("q"), _k(body), body.get("against", "image")
        if not isinstance(text, str):
            raise ApiError(400, "no_text", 'send the query text as a string in "q"')
        hits = await run_in_threadpool(searcher.by_text, text, k, against)
        return results({"text": text[:200], "k": k, "against": against}, hits)

    @app.get(
        "/api/search/item",
        response_model=None,
        responses={**found, **schema.refusals({400: schema.ITEM + schema.OPTIONS, 404: ("unknown_item",)})},
    )
    def search_item(
        id: str = Query(..., description="an item id of the index"),  # noqa: A002 - the API's name
        k: int = Query(10, ge=1, le=MAX_K, description="how many results"),
        against: Literal["image", "text"] | None = Query(None, description="default: not the item's modality"),
    ) -> dict[str, Any]:
        return results({"item": id, "k": k, "against": against}, searcher.by_item(id, k, against))

    @app.post(
        "/api/search/vector",
        response_model=None,
        responses={
            **found,
            **schema.refusals({400: schema.JSON_BODY + schema.VECTOR + schema.OPTIONS, 413: TOO_LARGE}),
        },
        openapi_extra=schema.json_request(schema.vector_body(searcher.index.meta["bundle"]["width"])),
    )
    async def search_vector(request: Request) -> dict[str, Any]:
        """``{"vector": [D] or [K, D] numbers, "k": 10, "against": "image"}``."""
        body = await json_body(request, settings.max_query_bytes)
        if "vector" not in body:
            raise ApiError(400, "no_vector", 'send the query embedding as "vector": [D] or [K, D] numbers')
        k, against = _k(body), body.get("against", "image")
        hits = await run_in_threadpool(searcher.by_vector, body["vector"], k, against)
        return results({"vector": "given", "k": k, "against": against}, hits)

    @app.post(
        "/api/search/image",
        response_model=None,
        responses={
            **found,
            **schema.refusals({400: schema.FORM + schema.OPTIONS, 413: TOO_LARGE, 422: schema.IMAGE}),
        },
        openapi_extra=schema.UPLOAD,
    )
    async def search_image(
        request: Request,
        k: int = Query(10, ge=1, le=MAX_K, description="how many results"),
        against: Literal["image", "text"] = Query("text", description="rank the items' texts or their images"),
    ) -> dict[str, Any]:
        # counted while the bytes arrive: a chunked upload declares no length
        form = await bounded_form(request, settings.max_upload_bytes + MULTIPART_OVERHEAD, _UPLOAD_OPTION)
        try:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise ApiError(400, "no_file", "send the image as multipart form field 'file'")
            data = await upload.read(settings.max_upload_bytes + 1)
        finally:
            await form.close()  # the spooled file now, not at garbage collection
        if len(data) > settings.max_upload_bytes:
            limit = settings.max_upload_bytes
            raise ApiError(413, "too_large", f"the image is over the limit of {limit} bytes{_UPLOAD_OPTION}")
        hits = await run_in_threadpool(_search_upload, searcher, data, k, against, settings.max_image_pixels)
        return results({"image": upload.filename, "k": k, "against": against}, hits)

    @app.get(
        "/api/items/thumbnail",
        response_class=Response,
        responses={**schema.answer(schema.PNG, "the item's thumbnail", "image/png"), **by_id},
    )
    def thumbnail(id: str = Query(...)) -> Response:  # noqa: A002
        buffer = io.BytesIO()
        Image.fromarray(searcher.thumbnail(id)).save(buffer, format="PNG")
        return Response(buffer.getvalue(), media_type="image/png", headers={"Cache-Control": "max-age=3600"})

    @app.get(
        "/api/items",
        response_model=None,
        responses={**schema.answer(schema.ITEM_ANSWER, "the item"), **by_id},
    )
    def item(id: str = Query(...)) -> dict[str, Any]:  # noqa: A002
        row = searcher.index.items.loc[searcher.item_position(id)]
        return {
            "item_id": id,
            "text": row["text"],
            "path": display(str(row["path"])),
            "has_image": bool(row["image_row"] >= 0),
        }

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    if settings.api_docs:

        @app.get("/docs", include_in_schema=False)
        def docs() -> FileResponse:
            return FileResponse(STATIC_DIR / "api.html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    schema.check_parameters(app.routes)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            described = get_openapi(title=app.title, version=app.version, routes=app.routes)
            token, host_check = settings.access.token is not None, settings.hosts.names is not None
            app.openapi_schema = schema.finish(described, token, host_check)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


_UPLOAD_OPTION = " (crossmodal serve --max-upload-mb)"
TOO_LARGE = ("too_large",)


def _k(body: dict[str, Any]) -> int:
    """A JSON body's ``k``: an integer (JSON has one number type: ``10.0`` is 10, as in the query string)."""
    k = body.get("k", 10)
    if isinstance(k, float) and k.is_integer():
        k = int(k)
    if isinstance(k, bool) or not isinstance(k, int):
        raise schema.bad_k(k)
    return k


def _search_upload(searcher: Searcher, data: bytes, k: int, against: str, max_pixels: int) -> list[Hit]:
    """Decode and validate the upload as the pipeline does (it needs a file), then search."""
    with tempfile.NamedTemporaryFile(prefix="crossmodal-upload-") as handle:
        handle.write(data)
        handle.flush()
        try:
            pixels = searcher.embedder.decode(handle.name, max_pixels=max_pixels)
        except ImageRejected as rejected:  # its detail names the temporary file: the client never sees it
            detail = rejected.detail.replace(handle.name, "the upload").replace(
                Path(handle.name).name, "the upload"
            )
            raise ImageRejected(rejected.reason, detail) from None
    return searcher.by_pixels(pixels, k, against)
