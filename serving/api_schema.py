"""What the OpenAPI description of ``crossmodal serve`` says beyond what FastAPI reads off the endpoints'
signatures: the request bodies the endpoints read themselves (bounded, serving/bodies.py), every refusal with
its status and reason codes (the table of docs/serving.md), the answers' shapes, and what depends on how the
server was started (the token, the ``Host`` check, the index's embedding width).

The reason codes are declared here once per kind of input; tests/test_api_fuzz.py checks them against the
table in docs/serving.md and against the codes the serving code raises, and a schema-driven fuzzer checks that
every answer the server gives is one this description lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from http import HTTPStatus
from typing import Any

from starlette.routing import Mount, Route

from serving.access import TOKEN_COOKIE, TOKEN_HEADER
from serving.bodies import ApiError
from serving.heads import MAX_HEAD_BYTES, MAX_URL_BYTES
from serving.index import MODALITIES
from serving.search import MAX_K, MAX_QUERY_ROWS

#: a query's options, wherever they come from (query string or JSON body), and what they are checked against
OPTIONS = ("bad_k", "bad_against", "empty_modality")
#: a text query: none sent, or one the model cannot read (serving/embed.py)
TEXT = ("no_text", "empty_text", "no_words", "no_known_word")
#: a JSON body as serving/bodies.py reads it
JSON_BODY = ("bad_content_length", "invalid_json", "too_deep", "too_many_digits")
#: a vector query (serving/search.py, query_vectors)
VECTOR = ("no_vector", "not_a_number", "ragged_vector", "not_finite", "zero_vector", "too_many_rows", "width_mismatch")
#: an upload's form (serving/bodies.py, bounded_form)
FORM = ("no_file", "bad_form", "bad_content_length")
#: an uploaded file that is not a usable image (data_recipes.validate.load_image_rgb's reasons for a file that
#: exists)
IMAGE = ("empty_file", "not_an_image", "truncated_image", "decompression_bomb", "unreadable_image")
#: a request without its item id
ITEM = ("no_id",)
_ERROR = "application/json"


def bad_k(value: object) -> ApiError:
    return ApiError(400, "bad_k", f"k must be an integer from 1 to {MAX_K}, got {repr(value)[:40]}")


def bad_against(value: object) -> ApiError:
    return ApiError(400, "bad_against", f"against must be one of {list(MODALITIES)}, got {repr(value)[:40]}")


#: the answer to a bad value of each query parameter FastAPI validates: a 400 with the reason a JSON body's bad
#: value gets (a missing ``q`` or ``id`` is the only way those two can be bad)
PARAMETER_REFUSALS = {
    "k": bad_k,
    "against": bad_against,
    "q": lambda value: (
        ApiError(400, "empty_text", "the query text is empty; type a few words")
        if isinstance(value, str)  # there, but outside QUERY_TEXT (empty, or whitespace alone)
        else ApiError(400, "no_text", 'send the query text as ?q=TEXT (or POST {"q": TEXT} as JSON)')
    ),
    "id": lambda _: ApiError(400, "no_id", "send the item id as ?id=ITEM"),
}


def parameter_refusal(errors: Sequence[Any]) -> ApiError:
    """FastAPI's validation errors of the query string as the API's answer: the first bad parameter's."""
    first = errors[0]
    return PARAMETER_REFUSALS[first["loc"][-1]](first.get("input"))


def check_parameters(routes: Iterable[Any]) -> None:
    """Every query parameter of the app has its answer in :data:`PARAMETER_REFUSALS` (checked when the app is
    built: a parameter added without one would turn a client's mistake into a 500)."""
    for route in routes:
        for parameter in getattr(getattr(route, "dependant", None), "query_params", []):
            if parameter.name not in PARAMETER_REFUSALS:
                raise ValueError(f"{route.path}: query parameter {parameter.name!r} has no PARAMETER_REFUSALS entry")


def refusals(by_status: dict[int, Iterable[str]]) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of an endpoint: for each status the API's JSON message with the reason codes it may hold."""
    answers: dict[int | str, dict[str, Any]] = {}
    for status, reasons in by_status.items():
        reasons = list(dict.fromkeys(reasons))
        answers[status] = {
            "description": f"{HTTPStatus(status).phrase}: " + ", ".join(f"`{reason}`" for reason in reasons),
            "content": {_ERROR: {"schema": error_schema(reasons)}},
        }
    return answers


def error_schema(reasons: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["error", "reason"],
        "additionalProperties": False,
        "properties": {"error": {"type": "string"}, "reason": {"type": "string", "enum": list(reasons)}},
    }


def answer(schema: dict[str, Any], description: str, media: str = "application/json") -> dict[int, dict[str, Any]]:
    return {200: {"description": description, "content": {media: {"schema": schema}}}}


def json_request(schema: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` of an endpoint that reads its JSON body itself (bounded: serving/bodies.py)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_K = {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 10}


def _against(default: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(MODALITIES), "default": default}


#: a query text the API takes: one character at least that is not whitespace (else ``empty_text``); the query
#: string's ``q`` is declared with the same bounds (serving/api.py)
QUERY_TEXT_MIN_LENGTH, QUERY_TEXT_PATTERN = 1, r"\S"
TEXT_BODY = {
    "type": "object",
    "required": ["q"],
    "properties": {"q": {"type": "string", "minLength": QUERY_TEXT_MIN_LENGTH, "pattern": QUERY_TEXT_PATTERN,
                         "description": "the query text (a whole article); not whitespace alone"},
                   "k": _K, "against": _against("image")},
}


def vector_body(width: int) -> dict[str, Any]:
    """A vector query as the index takes it: ``[D]`` or ``[K, D]`` JSON numbers, D the index's width."""
    # a row of zeros has no direction (``zero_vector``): a row holds one number that is not 0 at least
    row = {"type": "array", "items": {"type": "number"}, "minItems": width, "maxItems": width,
           "contains": {"type": "number", "not": {"const": 0}}}
    rows = {"type": "array", "items": row, "minItems": 1, "maxItems": MAX_QUERY_ROWS}
    return {
        "type": "object",
        "required": ["vector"],
        "properties": {"vector": {"oneOf": [row, rows], "description": "finite, no all-zero row"}, "k": _K,
                       "against": _against("image")},
    }


UPLOAD = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            }
        },
    }
}
_HIT = {
    "type": "object",
    "required": ["rank", "item_id", "score", "text", "path", "has_image"],
    "additionalProperties": False,
    "properties": {
        "rank": {"type": "integer", "minimum": 1},
        "item_id": {"type": "string"},
        "score": {"type": "number", "description": "cosine similarity"},
        "text": {"type": ["string", "null"]},
        "path": {"type": "string", "description": "relative to the gallery root unless --absolute-paths"},
        "has_image": {"type": "boolean"},
    },
}
RESULTS = {
    "type": "object",
    "required": ["query", "results"],
    "additionalProperties": False,
    "properties": {"query": {"type": "object"}, "results": {"type": "array", "items": _HIT, "maxItems": MAX_K}},
}
ITEM_ANSWER = {
    "type": "object",
    "required": ["item_id", "text", "path", "has_image"],
    "additionalProperties": False,
    "properties": {key: _HIT["properties"][key] for key in ("item_id", "text", "path", "has_image")},
}
_COUNT = {"type": "integer", "minimum": 0}
HEALTH = {
    "type": "object",
    "required": ["status", "items", "images", "texts", "model", "bundle_id", "width", "backbone", "search",
                 "thumbnail_size", "max_upload_bytes", "max_query_bytes", "paths"],
    "additionalProperties": False,
    "properties": {
        "status": {"const": "ok"},
        "items": _COUNT, "images": _COUNT, "texts": _COUNT, "width": _COUNT, "thumbnail_size": _COUNT,
        "max_upload_bytes": _COUNT, "max_query_bytes": _COUNT,
        "model": {"type": "string"}, "bundle_id": {"type": "string"}, "backbone": {"type": "string"},
        "search": {"type": "object", "properties": {m: {"type": "string"} for m in MODALITIES}},
        "paths": {"type": "string"},
    },
}
PNG = {"type": "string", "format": "binary"}

SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer"},
    "header": {"type": "apiKey", "in": "header", "name": TOKEN_HEADER},
    "query": {"type": "apiKey", "in": "query", "name": "token"},
    "cookie": {"type": "apiKey", "in": "cookie", "name": TOKEN_COOKIE},
}


def finish(schema: dict[str, Any], token: bool, host_check: bool) -> dict[str, Any]:
    """FastAPI's description of the app made true: its validation answer (422 ``{"detail": ...}``, which this
    API never gives: a bad parameter is a 400 with its reason) dropped; on every operation the refusals any
    request may get: 414 and 431 (serving/heads.py), 401 when the server needs its token (declared as its
    security schemes), 403 when it checks the ``Host`` header."""
    common: dict[int, tuple[str, ...]] = {414: ("uri_too_long",), 431: ("headers_too_large",)}
    if token:
        common[401] = ("unauthorized",)
        schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
        schema["security"] = [{name: []} for name in SECURITY_SCHEMES]
    if host_check:
        common[403] = ("host_not_allowed",)
    for operations in schema["paths"].values():
        for operation in operations.values():
            responses = operation["responses"]
            validation = responses.get("422", {}).get("content", {}).get(_ERROR, {}).get("schema", {})
            if validation.get("$ref", "").endswith("/HTTPValidationError"):
                del responses["422"]
            for status, answer_ in refusals(common).items():
                responses.setdefault(str(status), answer_)
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    if not components:
        schema.get("components", {}).pop("schemas", None)
    if not schema.get("components", True):
        del schema["components"]
    schema["info"]["description"] = (
        f"Every refusal is JSON {{\"error\": message, \"reason\": code}}. URLs up to {MAX_URL_BYTES} bytes, "
        f"request heads up to {MAX_HEAD_BYTES} bytes (docs/serving.md)."
    )
    return schema


def allowed_methods(routes: Iterable[Any], path: str) -> list[str]:
    """The methods the app answers at ``path`` (OPTIONS included), [] for a path it does not serve."""
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Mount) and path.startswith(route.path + "/"):
            methods |= {"GET", "HEAD"}  # the static files
        elif isinstance(route, Route) and route.path_regex.match(path):
            methods |= set(route.methods or ())
    return sorted(methods | {"OPTIONS"}) if methods else []
