"""The JSON API and the web page of ``crossmodal serve`` (FastAPI; see docs/serving.md for the endpoints).

Every input a user can get wrong is answered with a 4xx and ``{"error": message, "reason": code}``, never a
crash: the app keeps answering. Model inference runs in FastAPI's thread pool (the endpoints are plain
functions), so concurrent requests queue there instead of blocking the event loop.
"""

from __future__ import annotations

import io
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from PIL import Image
from pydantic import BaseModel

from data_recipes.validate import DEFAULT_MAX_PIXELS, ImageRejected
from serving.embed import QueryError
from serving.search import MAX_K, Hit, Searcher, UnknownItem

STATIC_DIR = Path(str(resources.files("serving") / "static"))
#: multipart framing around an uploaded file (boundaries, headers) allowed on top of the size limit
MULTIPART_OVERHEAD = 16 * 1024


@dataclass(frozen=True)
class ServeSettings:
    #: largest image upload accepted (413 above it)
    max_upload_bytes: int = 10 * 1024 * 1024
    #: largest decoded image (pixels), as the pipeline's decompression-bomb check
    max_image_pixels: int = DEFAULT_MAX_PIXELS


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class VectorQuery(BaseModel):
    vector: list[float] | list[list[float]]
    k: int = 10
    against: str = "image"


def _results(query: dict[str, Any], hits: list[Hit]) -> dict[str, Any]:
    return {"query": query, "results": [hit.as_dict() for hit in hits]}


def create_app(searcher: Searcher, settings: ServeSettings | None = None) -> FastAPI:
    settings = settings or ServeSettings()
    app = FastAPI(title="crossmodal search", version="1")

    def error(status: int, reason: str, message: str) -> JSONResponse:
        return JSONResponse(status_code=status, content={"error": message, "reason": reason})

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
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return error(422, "invalid_request", problems)

    @app.get("/api/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", **searcher.summary(), "max_upload_bytes": settings.max_upload_bytes}

    @app.get("/api/search/text")
    def search_text(
        q: str = Query(..., description="the query text"),
        k: int = Query(10, ge=1, le=MAX_K),
        against: str = Query("image", pattern="^(image|text)$"),
    ) -> dict[str, Any]:
        return _results({"text": q, "k": k, "against": against}, searcher.by_text(q, k, against))

    @app.get("/api/search/item")
    def search_item(
        id: str = Query(..., description="an item id of the index"),  # noqa: A002 - the API's name
        k: int = Query(10, ge=1, le=MAX_K),
        against: str | None = Query(None, pattern="^(image|text)$"),
    ) -> dict[str, Any]:
        return _results({"item": id, "k": k, "against": against}, searcher.by_item(id, k, against))

    @app.post("/api/search/vector")
    def search_vector(body: VectorQuery) -> dict[str, Any]:
        hits = searcher.by_vector(body.vector, body.k, body.against)
        return _results({"vector": "given", "k": body.k, "against": body.against}, hits)

    @app.post("/api/search/image")
    async def search_image(
        request: Request,
        k: int = Query(10, ge=1, le=MAX_K),
        against: str = Query("text", pattern="^(image|text)$"),
    ) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared is not None and not declared.isdigit():
            raise ApiError(400, "bad_content_length", f"Content-Length {declared!r} is not a byte count")
        if declared is not None and int(declared) > settings.max_upload_bytes + MULTIPART_OVERHEAD:
            raise ApiError(413, "too_large", _too_large(int(declared), settings.max_upload_bytes))
        form = await request.form(max_files=1, max_fields=4)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise ApiError(400, "no_file", "send the image as multipart form field 'file'")
        data = await upload.read(settings.max_upload_bytes + 1)
        if len(data) > settings.max_upload_bytes:
            raise ApiError(413, "too_large", _too_large(len(data), settings.max_upload_bytes))
        hits = await run_in_threadpool(_search_upload, searcher, data, k, against, settings.max_image_pixels)
        return _results({"image": upload.filename, "k": k, "against": against}, hits)

    @app.get("/api/items/thumbnail")
    def thumbnail(id: str = Query(...)) -> Response:  # noqa: A002
        buffer = io.BytesIO()
        Image.fromarray(searcher.thumbnail(id)).save(buffer, format="PNG")
        return Response(buffer.getvalue(), media_type="image/png", headers={"Cache-Control": "max-age=3600"})

    @app.get("/api/items")
    def item(id: str = Query(...)) -> dict[str, Any]:  # noqa: A002
        row = searcher.index.items.loc[searcher.item_position(id)]
        return {
            "item_id": id,
            "text": row["text"],
            "path": row["path"],
            "has_image": bool(row["image_row"] >= 0),
        }

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _too_large(size: int, limit: int) -> str:
    return f"the upload is {size} bytes; the limit is {limit} bytes (crossmodal serve --max-upload-mb)"


def _search_upload(searcher: Searcher, data: bytes, k: int, against: str, max_pixels: int) -> list[Hit]:
    """Decode and validate the upload as the pipeline does (it needs a file), then search."""
    with tempfile.NamedTemporaryFile(prefix="crossmodal-upload-") as handle:
        handle.write(data)
        handle.flush()
        pixels = searcher.embedder.decode(handle.name, max_pixels=max_pixels)
    return searcher.by_pixels(pixels, k, against)
