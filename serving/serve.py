"""``crossmodal serve``: the index and its bundle behind the JSON API and the page (serving/api.py), on the
address asked for, with the access rules of serving/access.py. Every option was checked before this runs
(serving/arguments.py), so what fails here is the index, the bundle or the address, each in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def serve(args: argparse.Namespace) -> None:
    """Open the index, check every search structure, bind the address, print it (and the token), serve."""
    from urllib.parse import quote

    import torch
    import uvicorn

    from serving.access import HostCheck, resolve_access
    from serving.api import ServeSettings, create_app
    from serving.arguments import bind_socket
    from serving.heads import MAX_HEAD_BYTES, BoundedH11Protocol
    from serving.search import Searcher

    # requests are embedded in parallel threads (FastAPI's pool): one core each instead of every request
    # fanning out over all cores
    torch.set_num_threads(1)
    # and so is each HNSW search: one query's graph walk is sequential, extra OpenMP threads only spin
    import faiss

    faiss.omp_set_num_threads(1)
    access = resolve_access(args.host, args.token)
    hosts = HostCheck.for_server(args.host, args.allowed_host or [], access)
    searcher = Searcher.open(Path(args.index), Path(args.bundle) if args.bundle else None)
    searcher.index.load_backends()  # a damaged search structure is refused now, not at the first query
    settings = ServeSettings(
        max_upload_bytes=int(args.max_upload_mb * 1024 * 1024),
        access=access,
        hosts=hosts,
        absolute_paths=args.absolute_paths,
        api_docs=args.api_docs,
    )
    app = create_app(searcher, settings)
    listening = bind_socket(args.host, args.port)  # the address is printed only once it is ours
    summary = searcher.summary()
    shown = f"[{args.host}]" if ":" in args.host else args.host
    address = f"http://{shown}:{listening.getsockname()[1]}/"
    print(f"Serving {summary['items']} items of {args.index} with {summary['model']} on {address}", flush=True)
    if access.token is not None:
        where = "a generated token (printed once; --token or $CROSSMODAL_TOKEN to choose one)" if access.generated else "its token"
        print(f"Every request needs {where}: open {address}?token={quote(access.token, safe='')}", flush=True)
    elif hosts.names is not None:
        extra = hosts.other_names()
        print(
            "Answering requests addressed to localhost or a loopback address"
            + (f" or {', '.join(extra)}" if extra else "")
            + " only (--allowed-host NAME adds a name)",
            flush=True,
        )
    # h11 with the head limit of serving/heads.py: an over-long head gets the API's JSON 414/431, not a reset
    config = uvicorn.Config(
        app, log_level=args.log_level.lower(), http=BoundedH11Protocol, h11_max_incomplete_event_size=MAX_HEAD_BYTES
    )
    server = uvicorn.Server(config)
    server.run(sockets=[listening])
