"""The persisted LSH index of deduplication: a :class:`pipeline.steps.lsh_index.DedupIndex` saved as one
``.npz`` (signatures, pair ids, verified links, settings), which the next shard's Deduplicate loads so that
only new texts are hashed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common.bounded_json import RECORD, loads_bounded
from common.files import atomic_path
from pipeline.steps.lsh_index import DedupIndex
from pipeline.steps.minhash import MINHASH_SCHEME


def save_dedup_index(index: DedupIndex, path: str | Path) -> None:
    """Write the index's signatures, pair ids, verified links and settings to ``path`` (.npz), atomically."""
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"a DedupIndex is saved as .npz, got {path}")
    settings = {
        "threshold": index.threshold,
        "lsh_threshold": index.lsh_threshold,
        "num_perm": index.num_perm,
        "seed": index.seed,
        "scheme": MINHASH_SCHEME,
    }
    # a file handle, so numpy does not append ".npz" to the temp name
    with atomic_path(path) as temp, open(temp, "wb") as handle:
        np.savez(
            handle,
            signatures=index.signatures,
            pair_ids=np.array(index.pair_ids, dtype=np.str_),
            edges=index.edges,
            settings=np.array(json.dumps(settings)),
        )


def load_dedup_index(path: str | Path) -> DedupIndex:
    """Read an index written by :func:`save_dedup_index`; band hashes are recomputed from the stored
    signatures."""
    with np.load(Path(path), allow_pickle=False) as stored:
        settings = loads_bounded(str(stored["settings"]), f"{path} (its settings)", RECORD)
        signatures = stored["signatures"]
        pair_ids = [str(p) for p in stored["pair_ids"]]
        edges = stored["edges"].astype(np.int64).reshape(-1, 2)
    if settings.get("scheme") != MINHASH_SCHEME:
        raise ValueError(
            f"{path} holds {settings.get('scheme')!r} signatures, not {MINHASH_SCHEME}; rebuild it"
        )
    index = DedupIndex(settings["threshold"], settings["num_perm"], settings["seed"], settings["lsh_threshold"])
    index.restore(pair_ids, signatures.astype(np.uint32), edges)
    return index
