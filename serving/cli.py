"""``crossmodal``: export a trained model, index a gallery, search it, serve it (see docs/serving.md).

    crossmodal export RUN_OR_TRAIN_DIR OUT
    crossmodal index BUNDLE --images DIR | --table pairs.csv --out INDEX [--backend auto|exact|annoy|hnsw|pq]
    crossmodal search INDEX --text "..." | --image PATH [-k 10] [--against image|text] [--json]
    crossmodal serve INDEX [--host 127.0.0.1 --port 8000]
    crossmodal evaluate BUNDLE [BUNDLE ...] [--open-clip MODEL:PRETRAINED ...] --table pairs.csv --out DIR
    crossmodal audit BUNDLE --table pairs.csv --out DIR [--flag-share 0.05]

Errors a user can fix (a missing or corrupt bundle, a bundle that does not match the index, a query the
model cannot read) print one line and exit with status 2; nothing prints a traceback for them.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

DEFAULT_MAX_UPLOAD_MB = 10.0
#: skipped rows printed by ``index``; all of them are in the index's rejects.csv
LISTED_REJECTS = 20


def _export(args: argparse.Namespace) -> None:
    from serving.bundle import export_bundle
    from serving.runs import bundle_parts, find_train_dir

    train_dir = find_train_dir(Path(args.source), args.variant, args.seed, args.protocol, args.report)
    manifest = export_bundle(bundle_parts(train_dir), Path(args.out))
    print(
        f"Exported {manifest['variant']['label']} (seed {manifest['source']['seed']}, epoch "
        f"{manifest['checkpoint_epoch']}) from {train_dir} to {args.out}: {manifest['embedding']['width']}-d "
        f"embeddings, {manifest['image']['backbone']} ({manifest['image']['trunk']} trunk, "
        f"{manifest['image']['features']} features, {manifest['image']['image_size']} px)"
    )


def _index(args: argparse.Namespace) -> None:
    import tempfile

    import pandas as pd

    from models.devices import pick_device
    from serving.bundle import load_bundle
    from serving.embed import Embedder
    from serving.gallery import folder_manifest, read_gallery, table_manifest
    from serving.index import INDEX_FILE, GalleryIndex, GalleryIndexError, embed_into

    bundle = load_bundle(Path(args.bundle))
    out = Path(args.out)
    if (out / INDEX_FILE).exists():
        index = GalleryIndex.open(out)
        index.check_bundle(bundle)
        if args.backend:
            index.use_backend(args.backend)
    else:
        index = GalleryIndex.create(out, bundle, backend=args.backend or "auto")
    manifests, sources = [], []
    with tempfile.TemporaryDirectory(prefix="crossmodal-table-") as tmp:
        if args.images:
            manifests.append(folder_manifest(Path(args.images)))
            sources.append(f"images {args.images}")
        if args.table:
            manifests.append(table_manifest(Path(args.table), Path(tmp)))
            sources.append(f"table {args.table}")
    batch = read_gallery(
        pd.concat(manifests, ignore_index=True), int(bundle.image["cache_size"]), set(index.position_of)
    )
    reasons = batch.rejects["reason"].value_counts().to_dict() if len(batch.rejects) else {}
    # nothing usable: an empty index would stay empty, or every row was bad (rows already indexed are not)
    if len(batch.items) == 0 and (len(index.items) == 0 or (reasons and "duplicate_pair_id" not in reasons)):
        raise GalleryIndexError(
            f"nothing to index in {', '.join(sources)}: "
            + (
                f"all {len(batch.rejects)} rows were skipped ({', '.join(f'{r}={n}' for r, n in reasons.items())})"
                if reasons
                else "it holds no items"
            )
            + f"; {out} is unchanged"
        )
    entry = embed_into(index, Embedder(bundle, pick_device()), batch, ", ".join(sources), progress=True)
    search = index.meta["search"]
    print(
        f"Indexed {entry['added']} new items ({entry['n_images']} images, {entry['n_texts']} texts) into {out}; "
        f"it now holds {len(index.items)} items."
    )
    if len(batch.rejects):
        reasons = ", ".join(f"{reason}={n}" for reason, n in entry["rejects_by_reason"].items())
        print(f"Skipped {len(batch.rejects)} ({reasons}):")
        for row in batch.rejects.head(LISTED_REJECTS).itertuples():
            print(f"  {row.pair_id}: {row.reason} ({row.detail})")
        if len(batch.rejects) > LISTED_REJECTS:
            print(f"  ... and {len(batch.rejects) - LISTED_REJECTS} more")
        print(f"Every skipped row (this and earlier runs): {out / 'rejects.csv'}")
    for modality in ("image", "text"):
        settings = search[modality]
        if settings.get("asked", "auto") != "auto":
            why = "asked for with --backend"
        else:
            side = "at or below" if settings["backend"] == "exact" else "above"
            why = f"{side} the measured crossover of {settings['exact_up_to']}; benchmarks/bench_search.py"
        tuned = ", ".join(
            f"{name} {settings[name]}"
            for name in ("M", "ef_construction", "ef_search", "n_trees", "search_k", "sub_quantizers", "rerank")
            if name in settings
        )
        print(
            f"{modality} search: {settings['backend']}{f' ({tuned})' if tuned else ''} "
            f"({settings['vectors']} vectors, {why})"
        )


def _search(args: argparse.Namespace) -> None:
    from serving.search import Searcher

    searcher = Searcher.open(Path(args.index), Path(args.bundle) if args.bundle else None)
    if args.text is not None:
        hits = searcher.by_text(args.text, args.k, args.against or "image")
    else:
        hits = searcher.by_image_file(Path(args.image), args.k, args.against or "text")
    if args.json:
        print(json.dumps({"results": [hit.as_dict() for hit in hits]}, indent=2))
        return
    for hit in hits:
        text = (hit.text or "").replace("\n", " ")
        print(f"{hit.rank:>3}  {hit.score:+.4f}  {hit.item_id}  {text[:100]}")


def _audit(args: argparse.Namespace) -> None:
    from serving.audit import AuditSettings, audit

    settings = AuditSettings(k=args.k, weights=tuple(args.weights))
    summary = audit(Path(args.bundle), Path(args.table), Path(args.out), settings, args.flag_share, args.top)
    print(
        f"Audited {summary['n_scored']} pairs of {args.table} ({summary['table']['n_rejected']} rejected"
        + (f"; k = {summary['k']}, all the table allows of the {args.k} asked" if summary["k"] != args.k else "")
        + "): "
        f"{Path(args.out) / 'audit.csv'}, {Path(args.out) / 'report.md'}"
        + (f"; {summary['n_flagged']} flagged, the rest in {Path(args.out) / 'filtered_pairs.csv'}" if "n_flagged" in summary else "")
    )


def _evaluate(args: argparse.Namespace) -> None:
    import time

    from models.devices import pick_device
    from serving.open_clip_baseline import load_baselines
    from serving.table_evaluation import evaluate_bundles

    started = time.perf_counter()
    device = pick_device()
    # every baseline's weights are found (or fetched) and loaded before the table is read, on the device the
    # bundles use
    baselines = load_baselines(args.open_clip or [], device)
    payload = evaluate_bundles(
        [Path(b) for b in args.bundles],
        Path(args.table),
        Path(args.out),
        args.redraws,
        device=device,
        progress=True,
        baselines=baselines,
        recall_ks=tuple(args.recall_k),
        dataset_name=args.dataset_name,
    )
    table = payload["table"]
    print(
        f"Scored {len(payload['bundles'])} model(s) on {table['n_kept']} pairs of {args.table} "
        f"({table['n_rejected']} rejected) in {time.perf_counter() - started:.1f} s: {Path(args.out) / 'report.md'}"
    )
    for bundle in payload["bundles"]:
        shown = [name for name in bundle["metrics"] if name.startswith(("5-way", "R@1 ")) or name == "rsum"]
        cells = ", ".join(
            f"{name} {bundle['metrics'][name].get('mean', bundle['metrics'][name].get('value')):.4f}"
            + (" †" if {"trivial", "includes_trivial"} & set(bundle["metrics"][name]) else "")
            for name in shown
        )
        print(f"  {bundle['label']}: {cells}")
        if "trivial_recalls" in bundle:
            print(
                f"  † 1 by construction, the table being this small: {', '.join(bundle['trivial_recalls'])} "
                "(k at or above the worst rank a correct item can have; see report.md)"
            )


def _serve(args: argparse.Namespace) -> None:
    from serving.serve import serve

    serve(args)


#: exit status of a command that ran out of disk (2: a mistake in the input or the arguments)
DISK_FULL_STATUS = 3


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="crossmodal", description=__doc__.split("\n\n")[0])
    commands = top.add_subparsers(dest="command", required=True)

    export = commands.add_parser("export", help="write a self-contained model bundle")
    export.add_argument("source", help="a run root (runs/) or one Train output folder (runs/Train/<hash>)")
    export.add_argument("out", help="the bundle folder to create")
    export.add_argument(
        "--variant", help="in a run root: the variant (default: the report's headline method)"
    )
    export.add_argument("--seed", type=int, help="in a run root: the training seed (default: the lowest)")
    export.add_argument(
        "--protocol",
        choices=["shared", "tuned"],
        help="in a run root: the run at the profile's settings (shared) or at the settings tuning chose "
        "(needed when the report ran both)",
    )
    export.add_argument(
        "--report", help="in a run root: the report (a prefix of its hash) whose run to export (default: the newest)"
    )
    export.set_defaults(run=_export)

    index = commands.add_parser("index", help="embed a gallery into a new or existing index")
    index.add_argument("bundle")
    index.add_argument("--images", help="a folder of images (image-only items, id = relative path)")
    index.add_argument("--table", help="a table of the pairs recipe's format (csv, jsonl, parquet)")
    index.add_argument("--out", required=True, help="the index folder; an existing index grows")
    index.add_argument(
        "--backend",
        choices=["auto", "exact", "annoy", "hnsw", "pq"],
        help="how each modality is searched: auto (default for a new index: exact up to "
        "serving.neighbors.EXACT_SEARCH_MAX_VECTORS vectors, a 4-bit PQ scan with exact re-rank above), "
        "exact, annoy, hnsw or pq; "
        "on an existing index it changes the index's choice",
    )
    index.set_defaults(run=_index)

    search = commands.add_parser("search", help="the top k items for a text or an image")
    search.add_argument("index")
    query = search.add_mutually_exclusive_group(required=True)
    query.add_argument("--text")
    query.add_argument("--image")
    search.add_argument("-k", type=int, default=10)
    search.add_argument(
        "--against",
        choices=["image", "text"],
        help="rank the items' images or texts (default: the other modality)",
    )
    search.add_argument("--json", action="store_true", help="print JSON")
    search.add_argument("--bundle", help="the bundle (default: the one the index was built with)")
    search.set_defaults(run=_search)

    serve = commands.add_parser("serve", help="JSON API and web page")
    serve.add_argument("index")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--bundle", help="the bundle (default: the one the index was built with)")
    serve.add_argument(
        "--max-upload-mb", type=float, default=DEFAULT_MAX_UPLOAD_MB, help="largest image upload"
    )
    serve.add_argument(
        "--token",
        help="the token every request must carry (default: $CROSSMODAL_TOKEN; off loopback, a generated one)",
    )
    serve.add_argument(
        "--absolute-paths", action="store_true", help="show items' absolute paths (loopback only; default: relative)"
    )
    serve.add_argument("--api-docs", action="store_true", help="serve /openapi.json and an endpoint list at /docs")
    serve.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="also answer requests addressed to NAME (repeatable); without a token the server answers only "
        "localhost, loopback addresses and the address it is bound to, against DNS rebinding",
    )
    serve.add_argument("--log-level", default="warning")
    serve.set_defaults(run=_serve)

    evaluate = commands.add_parser("evaluate", help="score bundles and CLIP baselines on a labelled image-text table")
    evaluate.add_argument(
        "bundles", nargs="*", help="model bundles; the first model is the one the others are compared with"
    )
    evaluate.add_argument(
        "--open-clip",
        action="append",
        metavar="MODEL:PRETRAINED",
        help="an open_clip baseline, e.g. ViT-B-32:laion2b_s34b_b79k or ViT-B-32:/path/weights.pt (repeatable; "
        "pip install -e '.[clip]')",
    )
    evaluate.add_argument(
        "--recall-k", type=int, nargs="+", default=[1, 5, 10], help="k's of the CLIP_benchmark-shaped recall@k"
    )
    evaluate.add_argument("--dataset-name", help="the dataset name in the CLIP_benchmark JSONs (default: the table's name)")
    evaluate.add_argument(
        "--table", required=True, help="a table of the pairs recipe's format (csv, jsonl, parquet)"
    )
    evaluate.add_argument("--out", required=True, help="folder for metrics.json, report.md and rejects.csv")
    evaluate.add_argument("--redraws", type=int, default=5, help="distractor redraws of the n-way tasks")
    evaluate.set_defaults(run=_evaluate)

    audit = commands.add_parser("audit", help="rank a table's pairs by how unlikely they belong together")
    audit.add_argument("bundle", help="a model bundle with its Doc2Vec (crossmodal export)")
    audit.add_argument("--table", required=True, help="a table of the pairs recipe's format (csv, jsonl, parquet)")
    audit.add_argument("--out", required=True, help="folder for audit.csv, report.md, rejects.csv")
    audit.add_argument("--k", type=int, default=10, help="neighbors per side")
    audit.add_argument(
        "--weights", type=float, nargs=3, default=[1.0, 1.0, 1.0], metavar=("CROSS", "IMAGE_NBHD", "TEXT_NBHD"),
        help="weights of the standardised components",
    )
    audit.add_argument("--flag-share", type=float, help="also write filtered_pairs.csv without this share of pairs")
    audit.add_argument("--top", type=int, default=24, help="pairs shown as thumbnails in report.md")
    audit.set_defaults(run=_audit)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    # One BLAS thread (set before numpy loads): exact search is memory-bound, so a second thread gains little
    # (34 -> 30 ms at 1M vectors) while its spinning steals the core torch needs for the next query's
    # embedding (text p99 1.7 -> 9.6 ms, more under load; benchmarks/bench_search.py)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = parser().parse_args(argv)
    if args.command == "index" and not (args.images or args.table):
        parser().error("index needs --images DIR and/or --table FILE")
    from common.run_folder import RunFolderError
    from data_recipes.manifest import ManifestError
    from data_recipes.validate import ImageRejected
    from serving.access import AccessError
    from serving.arguments import ArgumentProblem, ServeError, check_arguments
    from serving.bundle import BundleError
    from serving.embed import QueryError
    from serving.index import GalleryIndexError
    from serving.open_clip_baseline import OpenClipError
    from serving.table_evaluation import EvaluationError

    try:
        check_arguments(args)
        args.run(args)
    except (
        BundleError,
        RunFolderError,
        GalleryIndexError,
        QueryError,
        ImageRejected,
        ManifestError,
        EvaluationError,
        OpenClipError,
        AccessError,
        ServeError,
        ArgumentProblem,
        FileNotFoundError,
        FileExistsError,
    ) as error:
        print(f"crossmodal {args.command}: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        where = error.filename2 or error.filename or "the output"
        print(f"crossmodal {args.command}: no space left on device while writing {where}; free space and run it again", file=sys.stderr)
        return DISK_FULL_STATUS
    return 0


if __name__ == "__main__":
    sys.exit(main())
