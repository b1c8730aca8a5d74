"""Which resolution should the demo's frozen trunk see? Cost against topical signal of its features.

For each resolution, the cached embedded images (64 px, the dataset's own size) are resized and run through
the trunk once; we report inference images/s and the leave-one-out topic precision@10 of the pooled
features (cosine kNN among the images: how much of the topic a frozen trunk exposes to the projection),
with the same for raw pixels as the floor. Ratios are against the 64 px run of the same process.

    python benchmarks/bench_trunk_resolution.py [--n-pairs 3000] [--backbone efficientnet_lite0]
    python benchmarks/bench_trunk_resolution.py --quick    # 200 pairs at 64 and 96 px: seconds, a smoke test
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from data_recipes.embedded import build
from data_recipes.image_cache import build_image_cache
from pipeline.steps.features import trunk_feature_batches


def topic_precision_at_10(features: np.ndarray, topics: np.ndarray) -> float:
    unit = features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    top = np.argpartition(-similarity, 10, axis=1)[:, :10]
    return float((topics[top] == topics[:, None]).mean())


def main(argv: list[str] | None = None) -> list[dict]:
    """Prints the table; returns its rows (resolution, images/s, topic P@10)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-pairs", type=int, default=3000)
    parser.add_argument("--backbone", default="efficientnet_lite0")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 96, 128, 160])
    parser.add_argument("--quick", action="store_true", help="200 pairs at 64 and 96 px (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.n_pairs, args.sizes = 200, [64, 96]
    torch.set_num_threads(2)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        result = build(None, Path(tmp) / "raw", n_pairs=args.n_pairs, seed=0)
        manifest = result.manifest.merge(result.ground_truth[["pair_id", "topic"]], on="pair_id")
        build_image_cache(manifest, 64, Path(tmp) / "images.npy")
        images = np.load(Path(tmp) / "images.npy")
        topics = manifest["topic"].to_numpy()[: len(images)]
        pixels = images.reshape(len(images), -1).astype(np.float32)
        print(
            f"{len(images)} embedded images, {len(set(topics))} topics; chance P@10 = "
            f"{np.mean([np.mean(topics == t) for t in topics]):.3f}"
        )
        print(f"raw 64 px pixels: topic P@10 {topic_precision_at_10(pixels - pixels.mean(0), topics):.3f}")
        baseline_rate = None
        for size in args.sizes:
            started = time.perf_counter()
            batches, trunk = trunk_feature_batches(images, args.backbone, True, size, spatial=False, seed=0)
            loaded = trunk.pretrained_loaded
            features = np.concatenate(list(batches))
            rate = len(images) / (time.perf_counter() - started)
            baseline_rate = baseline_rate or rate
            precision = topic_precision_at_10(features, topics)
            rows.append({"image_size": size, "images_per_second": rate, "topic_precision_at_10": precision})
            print(
                f"{args.backbone} @ {size:3d} px (ImageNet weights: {loaded}): {rate:7.1f} img/s "
                f"({rate / baseline_rate:.2f}x of {args.sizes[0]} px), topic P@10 "
                f"{precision:.3f}"
            )
    return rows


if __name__ == "__main__":
    main()
