"""A `pairs` table of our own making, unlike the demo's data, for checking a protocol on a second table (issue 30).

The embedded generator's pictures and texts (another seed, another size, 96 px pictures), with a share of the
pairs *re-illustrated*: the picture replaced by the picture of another pair of the same topic, as a news desk
illustrates a story with a stock photo of its subject. The link between a pair's picture and its text then
runs through the topic only, so retrieval is harder and less literal than on the demo. Written as PNG files and
``pairs.csv`` (``image_path``, ``text``), the format any user's table has; the ground truth (topic, whether
re-illustrated) goes to ``ground_truth.csv`` beside it, which the pipeline never reads.

    python benchmarks/make_pairs_table.py --out work/pairs_table --n-pairs 3000 --seed 11 --reillustrate 0.4
    luigi --module pipeline FullRun --dataset pairs --raw-dir work/pairs_table/pairs.csv --protocol both
    python benchmarks/make_pairs_table.py --quick --out /tmp/pairs_table    # 120 pairs: a smoke test
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from data_recipes.embedded import build


def make_table(
    out: Path,
    n_pairs: int,
    seed: int,
    reillustrate: float,
    image_size: int = 96,
    boilerplate_share: float = 0.05,
    near_duplicate_share: float = 0.05,
) -> Path:
    """Generate the table under ``out``; returns the path of ``pairs.csv``."""
    if not 0.0 <= reillustrate <= 1.0:
        raise ValueError(f"reillustrate must be a share in [0, 1], got {reillustrate}")
    result = build(
        None,
        out,
        n_pairs=n_pairs,
        seed=seed,
        image_size=image_size,
        boilerplate_share=boilerplate_share,
        near_duplicate_share=near_duplicate_share,
    )
    manifest, truth = result.manifest, result.ground_truth
    rng = np.random.default_rng([seed, 1])
    images = manifest["image_path"].to_numpy().copy()
    chosen = rng.random(len(manifest)) < reillustrate
    for rows in truth.groupby("topic").groups.values():
        rows = np.asarray(rows)
        # the chosen pairs of the topic, in a random order, each take the picture of the one before it
        order = rng.permutation(rows[chosen[rows]])
        if len(order) > 1:
            images[order] = images[np.roll(order, 1)]
        else:
            chosen[order] = False  # a lone chosen pair keeps its own picture
    table = pd.DataFrame(
        {"image_path": [str(Path(p).relative_to(out.resolve())) for p in images], "text": manifest["text"]}
    )
    path = out / "pairs.csv"
    table.to_csv(path, index=False)
    pd.DataFrame(
        {"image_path": table["image_path"], "topic": truth["topic"], "kind": truth["kind"], "reillustrated": chosen}
    ).to_csv(out / "ground_truth.csv", index=False)
    return path


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--n-pairs", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--reillustrate", type=float, default=0.4, help="share of pairs given another picture of their topic")
    parser.add_argument("--boilerplate-share", type=float, default=0.05, help="site notices (0: none)")
    parser.add_argument("--near-duplicate-share", type=float, default=0.05, help="republished copies (0: none)")
    # the learning-tower profile trains at 160 px: its table is drawn at that size, not upsampled from 96
    parser.add_argument("--image-size", type=int, default=96, help="side in pixels the pictures are drawn at")
    parser.add_argument("--quick", action="store_true", help="120 pairs (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.n_pairs = 120
    args.out.mkdir(parents=True, exist_ok=True)
    path = make_table(
        args.out.resolve(),
        args.n_pairs,
        args.seed,
        args.reillustrate,
        image_size=args.image_size,
        boilerplate_share=args.boilerplate_share,
        near_duplicate_share=args.near_duplicate_share,
    )
    print(path)
    return path


if __name__ == "__main__":
    main()
