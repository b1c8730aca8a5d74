"""The fault table (issue 40), rows of the API, the server's options, ``index``, ``audit`` and ``evaluate``:
each probe a row asserting the status, the one line or JSON message, and that nothing is half-written.
``before`` records what each probe did at d4a4466 (issue 40's rows) or at 7285da5 (issue 46's: over-long
heads, methods, ``k`` and the request bodies the API description now holds). The API rows go to a real ``crossmodal serve`` (uvicorn
on a socket: a chunked body is only chunked on a real connection); the shared parts are tests/fault_table.py.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import uvicorn

from serving.cli import main
from tests.disks import tmpfs
from tests.fault_table import Fault, assert_json_refusal, assert_refused, half_written, run_command

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
MAX_UPLOAD_MB = 0.05
ALLOWED = "archive.lan"
QUERY = "protest over the unemployment rate in texas"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def served(smoke_test_table, tmp_path_factory):
    """``crossmodal serve`` of the smoke run's index on loopback, no token, one extra allowed name."""
    _, search_index, _ = smoke_test_table
    port = free_port()
    command = [sys.executable, "-m", "serving.cli", "serve", str(search_index.output_path("index")), "--port",
               str(port), "--max-upload-mb", str(MAX_UPLOAD_MB), "--allowed-host", ALLOWED, "--api-docs"]
    log = tmp_path_factory.mktemp("server") / "log.txt"  # a file, not a pipe: a full pipe would stop the server
    with open(log, "w") as output:
        process = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=output,
                                   stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        assert process.poll() is None and time.time() < deadline, f"the server did not start: {log.read_text()}"
        try:
            width = httpx.get(f"{base}/api/health", timeout=2).json()["width"]
            break
        except httpx.HTTPError:
            time.sleep(0.3)
    yield base, port, width
    process.terminate()
    process.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]  # no probe reached a 500


def vector_body(values: str, width: int) -> bytes:
    """A vector query whose first value is the literal ``values`` (JSON text) and the rest 0.1."""
    return ('{"vector": [' + ", ".join([values] + ["0.1"] * (width - 1)) + '], "k": 3}').encode()


API_ROWS = [
    Fault("nested 2000 deep", "api", lambda w: b'{"vector": ' + b"[" * 2000 + b"]" * 2000 + b"}", 400,
          "nests arrays or objects 2001 deep", "too_deep", "500 Internal Server Error (RecursionError)"),
    Fault("a string as a number", "api", lambda w: vector_body('"0.1"', w), 400, 'vector[0] is "0.1", a JSON string',
          "not_a_number", "200, ranked as 0.1"),
    Fault("a boolean as a number", "api", lambda w: vector_body("true", w), 400, "vector[0] is true, a JSON boolean",
          "not_a_number", "200, ranked as 1.0"),
    Fault("null as a number", "api", lambda w: vector_body("null", w), 400, "vector[0] is null", "not_a_number",
          "400 not_finite (null became NaN)"),
    Fault("an integer beyond float", "api", lambda w: vector_body("1" + "0" * 400, w), 400,
          "a number beyond the float range", "not_finite", "500 Internal Server Error (OverflowError)"),
    Fault("an integer of 5000 digits", "api", lambda w: vector_body("9" * 5000, w), 400,
          "the body holds an integer of 5,000 digits; at most 1000", "too_many_digits",
          "400 invalid_json: Exceeds the limit (4300 digits) for integer string conversion"),
    Fault("a literal beyond float", "api", lambda w: vector_body("1e999", w), 400, "NaN or infinite", "not_finite",
          "400 not_finite"),
    Fault("rows of two lengths", "api", lambda w: json.dumps({"vector": [[0.1] * w, [0.1] * (w - 1)]}).encode(),
          400, "equally long", "ragged_vector", "400 ragged_vector"),
]


@pytest.mark.parametrize("fault", API_ROWS, ids=Fault.id)
def test_api_refuses_pathological_json_in_one_json_message(fault, served):
    base, _, width = served
    answer = httpx.post(f"{base}/api/search/vector", content=fault.args(width),
                        headers={"content-type": "application/json"}, timeout=30)
    assert_json_refusal(answer.status_code, answer.json(), fault)


@pytest.mark.parametrize("scale", [1e308, 1e200, 1e-200, 1e-300])
def test_a_vector_of_huge_or_tiny_numbers_ranks_as_its_direction(scale, served):
    """Before: 1e308 and 1e200 overflowed the norm (200, every score 0.0), 1e-200 underflowed it (400
    zero_vector). A vector's scale says nothing about its direction: the answer is the unit vector's."""
    base, _, width = served
    direction = np.random.default_rng(0).uniform(-1, 1, size=width)
    direction /= np.abs(direction).max()  # so direction * 1e308 stays finite

    def ranked(vector: np.ndarray) -> list[tuple[str, float]]:
        answer = httpx.post(f"{base}/api/search/vector", json={"vector": vector.tolist(), "k": 5})
        assert answer.status_code == 200, answer.text
        return [(hit["item_id"], hit["score"]) for hit in answer.json()["results"]]

    reference, scaled = ranked(direction), ranked(direction * scale)
    assert [item for item, _ in scaled] == [item for item, _ in reference]
    assert np.allclose([s for _, s in scaled], [s for _, s in reference], atol=1e-5)
    assert any(abs(score) > 1e-3 for _, score in scaled)
    constant = httpx.post(f"{base}/api/search/vector", json={"vector": [scale] * width, "k": 3}).json()
    assert [hit["score"] for hit in constant["results"]] == [
        hit["score"] for hit in httpx.post(f"{base}/api/search/vector", json={"vector": [1.0] * width, "k": 3}).json()["results"]
    ]


def read_http(connection: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers (lower-case names) and body of one HTTP/1.1 answer read from ``connection``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        assert chunk, f"the server closed the connection without an answer: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, value in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", 0))
    while len(body) < length:
        body += connection.recv(65536)
    return int(lines[0].split()[1]), headers, body[:length]


def read_answer(connection: socket.socket) -> tuple[int, dict]:
    """The status and JSON body of one HTTP/1.1 answer read from ``connection``."""
    status, _, body = read_http(connection)
    return status, json.loads(body)


def stream_without_end(port: int, path: str, content_type: str, first: bytes, up_to: int) -> tuple[int, dict, int]:
    """POST a chunked body (no Content-Length) 16 KiB at a time up to ``up_to`` bytes and never send its last
    chunk: a server that reads a body to its end never answers (a 30 s timeout), one that stops at its limit
    answers while the client is still sending. Returns the status, the JSON answer and the bytes sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n".encode())
        sent, chunk = 0, b"0" * 16384
        for part in [first] + [chunk] * (up_to // len(chunk)):
            if select.select([connection], [], [], 0.02)[0]:
                break  # the answer came while the body was still arriving
            try:
                connection.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            except OSError:  # the server answered and closed: the answer is in the receive buffer
                break
            sent += len(part)
        status, body = read_answer(connection)
    return status, body, sent


@pytest.mark.parametrize(
    "fault",
    [
        Fault("chunked upload over the limit", "api", ("/api/search/image", "multipart/form-data; boundary=XX",
              b'--XX\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n\r\n', 4 << 20), 413,
              "goes past the limit of", "too_large", "no answer: the whole body was read first"),
        Fault("chunked query over 1 MiB", "api", ("/api/search/vector", "application/json", b'{"vector": [', 4 << 20),
              413, "goes past the limit of 1048576 bytes", "too_large", "413 too_large"),
    ],
    ids=Fault.id,
)
def test_a_streamed_body_is_cut_at_the_limit(fault, served):
    _, port, _ = served
    status, body, sent = stream_without_end(port, *fault.args)
    assert_json_refusal(status, body, fault)
    assert sent < fault.args[3], "answered before the client finished sending"


def get_head(target: bytes, headers: bytes = b"") -> bytes:
    return b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n"


#: a refusal's phrase whichever part refused the head: the app (the head arrived whole: "is N bytes; the limit
#: is") or uvicorn's parser (it grew past 16 KiB before it was complete: "goes past the limit of")
HEAD_ROWS = [
    Fault("a 100 KB query string", "api", get_head(b"/api/search/text?q=" + b"a" * 100_000), 414,
          "8192 bytes; send a long text as JSON", "uri_too_long", "connection reset, no HTTP status"),
    Fault("a 1 MB query string", "api", get_head(b"/api/search/text?q=" + b"a" * 1_000_000), 414,
          "8192 bytes; send a long text as JSON", "uri_too_long", "connection reset, no HTTP status"),
    Fault("a 10 KB query string", "api", get_head(b"/api/search/text?q=" + b"a" * 10_000), 414,
          "the URL is 10019 bytes; the limit is 8192 bytes", "uri_too_long",
          "answered as a query (400 no_known_word); 17 KB and more: answered or reset, as the bytes arrived"),
    Fault("a 100 KB header", "api", get_head(b"/api/health", b"X-Big: " + b"a" * 100_000 + b"\r\n"), 431,
          "16384 bytes", "headers_too_large", "connection reset, no HTTP status"),
    Fault("bytes that are not HTTP", "api", b"HELLO THERE\r\n\r\n", 400, "not valid HTTP/1.1", "bad_http",
          "400 text/plain 'Invalid HTTP request received.'"),
]


@pytest.mark.parametrize("fault", HEAD_ROWS, ids=Fault.id)
def test_an_over_long_or_broken_head_gets_one_json_message(fault, served):
    """The head is sent 8 KiB at a time, as a network delivers it (in one piece, a 100 KB head was parsed
    whole and answered; in pieces uvicorn's parser gave up at 16 KiB and closed the socket mid-request)."""
    _, port, _ = served
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        for start in range(0, len(fault.args), 8192):
            connection.sendall(fault.args[start : start + 8192])
            time.sleep(0.001)
        status, headers, body = read_http(connection)
    assert headers["content-type"] == "application/json"
    assert_json_refusal(status, json.loads(body), fault)


METHOD_ROWS = [
    Fault("OPTIONS on a POST route", "api", ("OPTIONS", "/api/search/text"), 204, "GET, OPTIONS, POST",
          before="405, Allow: GET"),
    Fault("OPTIONS on a POST-only route", "api", ("OPTIONS", "/api/search/vector"), 204, "OPTIONS, POST",
          before='405 {"detail": "Method Not Allowed"}, Allow: POST'),
    Fault("PUT on a route", "api", ("PUT", "/api/search/text"), 405, "GET, OPTIONS, POST", "method_not_allowed",
          '405 {"detail": "Method Not Allowed"}, Allow: GET'),
    Fault("HEAD on a GET route", "api", ("HEAD", "/api/health"), 405, "GET, OPTIONS", "method_not_allowed",
          "405, Allow: GET"),
    Fault("an unknown path", "api", ("GET", "/api/nothing"), 404, "nothing is served at '/api/nothing'",
          "not_found", '404 {"detail": "Not Found"}'),
]


@pytest.mark.parametrize("fault", METHOD_ROWS, ids=Fault.id)
def test_options_and_refused_methods_name_the_methods_a_path_answers(fault, served):
    """``said`` is the Allow header (OPTIONS: 204, no body; 405: the JSON message names the methods too)."""
    base, _, _ = served
    method, path = fault.args
    answer = httpx.request(method, f"{base}{path}")
    if fault.status == 204:
        assert (answer.status_code, answer.headers["allow"], answer.content) == (204, fault.said, b"")
    elif method == "HEAD":  # no body, by HTTP's rule
        assert (answer.status_code, answer.headers["allow"]) == (405, fault.said)
    else:
        assert_json_refusal(answer.status_code, answer.json(), fault)
        assert fault.status == 404 or answer.headers["allow"] == fault.said


K_ROWS = [
    Fault("a non-integer k in a JSON body", "api", ("POST", "/api/search/vector", lambda w: {
          "json": {"vector": [0.1] * w, "k": "ten"}}), 400, "k must be an integer from 1 to 1000, got 'ten'", "bad_k",
          "422 invalid_request"),
    Fault("a fractional k in a JSON body", "api", ("POST", "/api/search/text", lambda w: {
          "json": {"q": QUERY, "k": 2.5}}), 400, "got 2.5", "bad_k", "422 invalid_request"),
    Fault("a non-integer k in the query string", "api", ("GET", "/api/search/text", lambda w: {
          "params": {"q": QUERY, "k": "ten"}}), 400, "k must be an integer from 1 to 1000, got 'ten'", "bad_k",
          "422 invalid_request ('query.k: Input should be a valid integer, ...')"),
    Fault("k 0 in the query string", "api", ("GET", "/api/search/item", lambda w: {
          "params": {"id": "x", "k": "0"}}), 400, "got '0'", "bad_k", "422 invalid_request"),
    Fault("against x in the query string", "api", ("GET", "/api/search/text", lambda w: {
          "params": {"q": QUERY, "against": "x"}}), 400, "against must be one of ['image', 'text']", "bad_against",
          "422 invalid_request"),
    Fault("against x in a JSON body", "api", ("POST", "/api/search/text", lambda w: {
          "json": {"q": QUERY, "against": "x"}}), 400, "against must be one of ['image', 'text']", "bad_against",
          "400 bad_against (not in docs/serving.md)"),
    Fault("no q in the query string", "api", ("GET", "/api/search/text", lambda w: {}), 400,
          "send the query text as ?q=TEXT", "no_text", "422 invalid_request"),
    Fault("no item id", "api", ("GET", "/api/items", lambda w: {}), 400, "send the item id as ?id=ITEM", "no_id",
          "422 invalid_request"),
]


@pytest.mark.parametrize("fault", K_ROWS, ids=Fault.id)
def test_a_bad_parameter_gets_its_reason_wherever_it_is_given(fault, served):
    base, _, width = served
    method, path, request = fault.args
    answer = httpx.request(method, f"{base}{path}", **request(width))
    assert_json_refusal(answer.status_code, answer.json(), fault)


BODY_ROWS = [
    Fault("a text query as the description's body", "api", ("/api/search/text", "application/json"), 200, "",
          before='no body in the description: a client built from it sent none (400 invalid_json)'),
    Fault("a vector query as the description's body", "api", ("/api/search/vector", "application/json"), 200, "",
          before='no body in the description: a client built from it sent none (400 invalid_json)'),
    Fault("an upload as the description's form", "api", ("/api/search/image", "multipart/form-data"), 200, "",
          before="no body in the description: a client built from it sent none (400 no_file)"),
]


@pytest.mark.parametrize("fault", BODY_ROWS, ids=Fault.id)
def test_a_body_built_from_the_description_is_answered_as_it_says(fault, served, smoke_test_table):
    """A request built from /openapi.json alone, as a generated client would: the body's required fields
    (a query text, a vector as long as the description says, an image file) and ``k`` 3.0, a JSON number the
    description's integer allows (before: 422 invalid_request); the answer has the description's fields."""
    base, _, _ = served
    folder, _, _ = smoke_test_table
    path, media = fault.args
    operation = httpx.get(f"{base}/openapi.json").json()["paths"][path]["post"]
    described = (operation.get("requestBody") or {}).get("content", {}).get(media, {}).get("schema")
    assert described is not None, f"the description gives no {media} body for POST {path}"
    if media == "multipart/form-data":
        image = next(folder.glob("*.png")).read_bytes()
        answer = httpx.post(f"{base}{path}", params={"k": 3}, files={described["required"][0]: ("a.png", image)})
    else:
        (field,) = described["required"]
        value = QUERY if field == "q" else [0.1] * described["properties"][field]["oneOf"][0]["minItems"]
        answer = httpx.post(f"{base}{path}", json={field: value, "k": 3.0})
    assert answer.status_code == fault.status, answer.text
    hit = operation["responses"]["200"]["content"]["application/json"]["schema"]["properties"]["results"]["items"]
    results = answer.json()["results"]
    assert len(results) == 3 and all(set(result) == set(hit["required"]) for result in results)


HOST_ROWS = [
    Fault("a foreign Host", "server", "evil.example:{port}", 403, "not Host 'evil.example:", "host_not_allowed",
          "200: a rebound page reads the archive"),
    Fault("a foreign Host on a static file", "server", "evil.example", 403, "--allowed-host NAME", "host_not_allowed",
          "200"),
    Fault("a name that starts like localhost", "server", "localhost.evil.example:{port}", 403, "not Host",
          "host_not_allowed", "200"),
    Fault("a name that starts like 127.0.0.1", "server", "127.0.0.1.evil.example", 403, "not Host",
          "host_not_allowed", "200"),
]


@pytest.mark.parametrize("fault", HOST_ROWS, ids=Fault.id)
def test_a_server_without_a_token_answers_only_requests_addressed_to_this_machine(fault, served):
    base, port, _ = served
    path = "/static/app.js" if "static" in fault.name else "/api/health"
    answer = httpx.get(f"{base}{path}", headers={"Host": fault.args.format(port=port)})
    assert_json_refusal(answer.status_code, answer.json(), fault)


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST.", "[::1]:{port}",
                                  "photos.localhost:{port}", "127.0.0.2", f"{ALLOWED}:{{port}}", ALLOWED.upper()])
def test_this_machines_names_and_allowed_hosts_are_answered(host, served):
    base, port, _ = served
    assert httpx.get(f"{base}/api/health", headers={"Host": host.format(port=port)}).status_code == 200


SERVE = ["serve", "{index}", "--port", "0"]
OPTION_ROWS = [
    Fault("a non-ASCII token", "server", [*SERVE, "--token", "tökenöööö"], 2, "--token holds 'ö'",
          before="accepted; no header could ever match it"),
    Fault("a token a cookie cannot carry", "server", [*SERVE, "--token", "abc;defgh1"], 2, "--token holds ';'",
          before="accepted; the page's cookie could not hold it"),
    Fault("an empty CROSSMODAL_TOKEN", "server", SERVE, 2, "$CROSSMODAL_TOKEN is empty",
          before="'a token needs at least 8 characters' (the variable not named)"),
    Fault("a short CROSSMODAL_TOKEN", "server", SERVE, 2, "$CROSSMODAL_TOKEN has 5 characters", before="exit 2"),
    Fault("max-upload-mb inf", "server", [*SERVE, "--max-upload-mb", "inf"], 2,
          "--max-upload-mb must be a positive number of megabytes up to 1024, got inf",
          before="exit 1, OverflowError traceback"),
    Fault("max-upload-mb nan", "server", [*SERVE, "--max-upload-mb", "nan"], 2, "got nan", before="exit 2"),
    Fault("max-upload-mb negative", "server", [*SERVE, "--max-upload-mb", "-1"], 2, "got -1.0", before="exit 2"),
    Fault("max-upload-mb under a byte", "server", [*SERVE, "--max-upload-mb", "1e-9"], 2, "got 1e-09",
          before="served, refusing every upload"),
    Fault("an empty host", "server", [*SERVE, "--host", ""], 2, "--host is empty",
          before="exit 2 after loading the index, 'cannot listen on :8000'"),
    Fault("a host IDNA cannot encode", "server", [*SERVE, "--host", "x" * 300], 2, "is not an address",
          before="exit 1, UnicodeError traceback"),
    Fault("an allowed host with a space", "server", [*SERVE, "--allowed-host", "a b"], 2, "--allowed-host takes",
          before="no such option"),
    Fault("audit weights nan", "audit", ["audit", "{bundle}", "--table", "{table}", "--out", "{out}",
          "--weights", "nan", "1", "1"], 2, "--weights must be finite numbers, got nan",
          before="exit 0, every score nan (table order)"),
    Fault("audit weights inf", "audit", ["audit", "{bundle}", "--table", "{table}", "--out", "{out}",
          "--weights", "1", "inf", "1"], 2, "got 1.0 inf 1.0", before="exit 0, scores ±inf"),
]


def never_serve(*_: object, **__: object) -> None:
    raise AssertionError("the command started serving: the option was not refused before")


@pytest.mark.parametrize("fault", OPTION_ROWS, ids=Fault.id)
def test_every_option_is_refused_in_one_line_before_any_work(fault, smoke_test_table, tmp_path, monkeypatch):
    folder, search_index, _ = smoke_test_table
    # a serve that accepted the option would serve until killed: fail instead of hanging the suite
    monkeypatch.setattr(uvicorn.Server, "run", never_serve)
    monkeypatch.delenv("CROSSMODAL_TOKEN", raising=False)
    if "CROSSMODAL_TOKEN" in fault.name:
        monkeypatch.setenv("CROSSMODAL_TOKEN", "" if "empty" in fault.name else "short")
    values = {"index": search_index.output_path("index"), "bundle": search_index.output_path("bundle"),
              "table": folder / "pairs.csv", "out": tmp_path / "out"}
    started = time.perf_counter()
    done = run_command(main, [arg.format(**values) for arg in fault.args])
    assert_refused(done, fault)
    assert done.stdout == "" and time.perf_counter() - started < 5, "refused before anything was loaded"
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def tables(smoke_test_table, tmp_path_factory):
    """Tables beside the smoke run's test split: its first five pairs, and six pairs plus a row whose image is
    a system file."""
    folder, _, _ = smoke_test_table
    pairs = pd.read_csv(folder / "pairs.csv")
    good = pairs[~pairs["pair_id"].isin(["html", "blank"])].copy()
    good["image_path"] = [str(folder / path) for path in good["image_path"]]
    out = tmp_path_factory.mktemp("tables")
    good.head(5).to_csv(out / "five.csv", index=False)
    system = pd.DataFrame([{"pair_id": "passwd", "image_path": "/etc/passwd", "text": "a caption pointing at a system file"}])
    pd.concat([good.head(6), system]).to_csv(out / "system_file.csv", index=False)
    return out


def test_audit_records_the_k_it_used_not_the_k_asked(smoke_test_table, tmp_path):
    """Before: summary.json said k = 1000 on a 35-pair table whose neighborhoods hold at most 34 pairs."""
    folder, search_index, n_pairs = smoke_test_table
    out = tmp_path / "audit"
    done = run_command(main, ["audit", str(search_index.output_path("bundle")), "--table", str(folder / "pairs.csv"),
                              "--out", str(out), "--k", "1000"])
    assert done.status == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["k"], summary["k_asked"]) == (n_pairs - 1, 1000)
    assert f"k = {n_pairs - 1}, all the table allows of the 1000 asked" in done.stdout
    assert f"(k = {n_pairs - 1}, fewer than the 1000 asked" in (out / "report.md").read_text()
    assert half_written(out) == []


def test_evaluate_marks_recalls_that_are_one_by_construction(smoke_test_table, tables, tmp_path):
    """Before: R@10 = 1.0 and rsum 400 on a 5-pair table, said as a measurement."""
    _, search_index, _ = smoke_test_table
    out = tmp_path / "evaluate"
    done = run_command(main, ["evaluate", str(search_index.output_path("bundle")), "--table", str(tables / "five.csv"),
                              "--out", str(out), "--recall-k", "1", "5"])
    assert done.status == 0, done.stderr
    model = json.loads((out / "metrics.json").read_text())["bundles"][0]
    metrics = model["metrics"]
    trivial = {name for name, metric in metrics.items() if "trivial" in metric}
    assert trivial == {"R@5 I→T", "R@5 T→I", "R@10 I→T", "R@10 T→I"}  # 5 candidates: a rank is at most 5
    assert all(metrics[name]["mean"] == 1.0 for name in trivial) and "trivial" not in metrics["R@1 I→T"]
    assert metrics["rsum"]["includes_trivial"] == sorted(trivial)
    assert set(model["trivial_recalls"]) == trivial | {"image_retrieval_recall@5", "text_retrieval_recall@5"}
    assert "k = 10 ≥ 5" in metrics["R@10 I→T"]["trivial"]
    report = (out / "report.md").read_text()
    assert "1 by construction" in report and report.count(" †") >= 5  # four recalls and rsum
    assert "† 1 by construction" in done.stdout
    assert half_written(out) == []


def test_a_row_pointing_at_a_system_file_is_rejected_without_quoting_it(smoke_test_table, tables, tmp_path):
    """Before: rejects.csv and the listing said "unknown format (starts with b'root:x:0:0:root:')"."""
    _, search_index, _ = smoke_test_table
    out = tmp_path / "index"
    done = run_command(main, ["index", str(search_index.output_path("bundle")), "--table",
                              str(tables / "system_file.csv"), "--out", str(out)])
    assert done.status == 0, done.stderr
    rejects = pd.read_csv(out / "rejects.csv")
    assert rejects.to_dict("records") == [
        {"pair_id": "passwd", "reason": "not_an_image", "detail": "not an image file (unrecognised format)"}
    ]
    assert "passwd: not_an_image (not an image file (unrecognised format))" in done.stdout
    first_line = Path("/etc/passwd").read_text().split(":")[0]
    assert f"{first_line}:" not in done.stdout + (out / "rejects.csv").read_text()
    assert half_written(out) == []


def test_index_on_a_nearly_full_disk_names_the_disk_and_leaves_nothing_half_written(smoke_test_table, tmp_path):
    """Before: exit 1, "OSError: 107520 requested and 32640 written" (numpy's fwrite: no errno, no file)."""
    folder, search_index, _ = smoke_test_table
    with tmpfs(tmp_path / "disk", "1m") as disk:
        # room for the headers and the small vector files, not for the thumbnails: a write cut off midway
        (disk / "filler").write_bytes(b"\0" * ((1 << 20) - (48 << 10)))
        out = disk / "index"
        done = run_command(main, ["index", str(search_index.output_path("bundle")), "--table",
                                  str(folder / "pairs.csv"), "--out", str(out)])
        fault = Fault("index on a nearly full disk", "index", None, 3, f"no space left on device while writing {out}/")
        assert_refused(done, fault)
        assert "free space and run it again" in done.stderr
        assert half_written(disk) == [] and not (out / "index.json").exists()
