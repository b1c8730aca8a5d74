"""Forward+backward time of every registered loss at batch 64, 256 and 1024 (D=256, CPU), next to the
pytorch-metric-learning equivalent where one exists, measured in the same run.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/bench_losses.py [--repeats 7] [--batches 64 256]
    python benchmarks/bench_losses.py --quick     # batch 20, D 32, one repeat: seconds, a smoke test (no file)

Each loss is built with its default parameters and given the first keyword batch it accepts: plain pairs
(every row its own group, one sampled neighbor per row) or grouped pairs (five captions per image, the
image row repeated, as COCO batches are built); a loss refusing both is skipped with its reason. Every
timing is the median over ``--repeats`` runs after two warm-up runs. An address-space limit keeps a loss
whose memory grows cubically with the batch from taking the shared machine down: it is skipped at that
size instead. The table is printed and written as JSON to ``benchmarks/results/losses.json``.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from result_files import write_results  # noqa: E402

from models.losses import LOSSES, LossPreconditionError, build_loss  # noqa: E402

CAPTIONS_PER_IMAGE = 5
FLOAT_KEYS = ("image", "text", "neighbor_image", "neighbor_text")


def unit_rows(generator: torch.Generator, rows: int, dim: int) -> torch.Tensor:
    return F.normalize(torch.randn(rows, dim, generator=generator), dim=1)


def keyword_batch(variant: str, batch: int, dim: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every keyword of ``models.losses.base``: pairs, group ids and one sampled neighbor per row."""
    generator = torch.Generator().manual_seed(seed)
    if variant == "pairs":
        group_ids = torch.arange(batch)
        image = unit_rows(generator, batch, dim)
    elif variant == "grouped":
        group_ids = torch.arange(batch) // CAPTIONS_PER_IMAGE
        image = unit_rows(generator, int(group_ids.max()) + 1, dim)[group_ids]
    else:
        raise KeyError(f"unknown batch variant {variant!r}; use 'pairs' or 'grouped'")
    return {
        "image": image,
        "text": unit_rows(generator, batch, dim),
        "group_ids": group_ids,
        "neighbor_image": unit_rows(generator, batch, dim),
        "neighbor_text": unit_rows(generator, batch, dim),
        "neighbor_of": torch.randperm(batch, generator=generator),
        # ids no batch row has: the sampled neighbors are items outside the batch
        "neighbor_group_ids": torch.arange(batch) + batch,
    }


def with_fresh_leaves(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone().requires_grad_(key in FLOAT_KEYS) for key, value in batch.items()}


def median_ms(step: Callable[[], None], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def ours_step(loss: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Callable[[], None]:
    def step() -> None:
        leaves = with_fresh_leaves(batch)
        sum(loss(**leaves).values()).backward()

    return step


def pml_steps(batch: dict[str, torch.Tensor]) -> dict[str, tuple[str, dict, Callable[[], None]]]:
    """Our loss name -> (PML description, our matching params, forward+backward of the PML equivalent).

    Every PML loss is called once per retrieval direction (image as ``embeddings``, text as ``ref_emb``
    and the reverse), since ours are symmetric; labels are the group ids, ``ref_labels`` a distinct copy
    (PML drops the diagonal pairs when ``ref_labels is labels``).
    """
    try:
        from pytorch_metric_learning import losses, miners
        from pytorch_metric_learning.distances import CosineSimilarity
        from pytorch_metric_learning.reducers import SumReducer
    except ImportError:
        return {}
    angular = losses.AngularLoss(alpha=45)
    nt_xent = losses.NTXentLoss(temperature=0.1)
    miner = miners.BatchHardMiner(distance=CosineSimilarity())
    triplet = losses.TripletMarginLoss(margin=0.2, distance=CosineSimilarity(), reducer=SumReducer())

    def both_directions(
        call: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ):
        def step() -> None:
            leaves = with_fresh_leaves(batch)
            labels = leaves["group_ids"]
            total = call(leaves["image"], labels, leaves["text"], labels.clone())
            total = total + call(leaves["text"], labels, leaves["image"], labels.clone())
            total.backward()

        return step

    def mined_triplet(embeddings, labels, ref_emb, ref_labels):
        triplets = miner(embeddings, labels, ref_emb=ref_emb, ref_labels=ref_labels)
        return triplet(embeddings, labels, indices_tuple=triplets, ref_emb=ref_emb, ref_labels=ref_labels)

    return {
        "angular": (
            "AngularLoss(alpha=45)",
            {"form": "smooth", "alpha_degrees": 45.0},
            both_directions(lambda e, lab, r, rl: angular(e, lab, ref_emb=r, ref_labels=rl)),
        ),
        "nt_xent": (
            "NTXentLoss(temperature=0.1)",
            {"temperature": 0.1},
            both_directions(lambda e, lab, r, rl: nt_xent(e, lab, ref_emb=r, ref_labels=rl)),
        ),
        "triplet": (
            "TripletMarginLoss(0.2, cosine, SumReducer)+BatchHardMiner",
            {"distance": "cosine", "negatives": "hardest", "margin": 0.2},
            both_directions(mined_triplet),
        ),
    }


def first_accepted_variant(loss: torch.nn.Module, dim: int) -> tuple[str | None, str]:
    """The first batch variant the loss runs on (probed at a small batch), or None and the refusals."""
    reasons = []
    for variant in ("pairs", "grouped"):
        try:
            loss(**keyword_batch(variant, 2 * CAPTIONS_PER_IMAGE, dim))
            return variant, ""
        except LossPreconditionError as error:
            reasons.append(f"{variant}: {error}")
    return None, " | ".join(reasons)


def same_configuration(name: str, params: dict) -> bool:
    """Whether ``params`` leave the loss as its defaults do (compared on the built objects' settings)."""

    def settings(loss: torch.nn.Module) -> dict:
        return {
            key: value for key, value in vars(loss).items() if not key.startswith("_") and key != "training"
        }

    return settings(build_loss(name)) == settings(build_loss(name, **params))


def limit_address_space(extra_gib: float) -> None:
    """Let this process grow by at most ``extra_gib`` GiB, so an oversized allocation fails in torch
    (and is reported) instead of waking the OOM killer on a machine others share."""
    status = Path("/proc/self/status")
    if extra_gib <= 0 or not status.exists():
        return
    vm_kib = next(
        int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmSize:")
    )
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = vm_kib * 1024 + int(extra_gib * 2**30)
    resource.setrlimit(
        resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard)
    )


def run(batches: list[int], dim: int, repeats: int) -> dict:
    rows, skipped = [], []
    for name in sorted(LOSSES):
        variant, reason = first_accepted_variant(build_loss(name), dim)
        if variant is None:
            print(f"skip {name}: cannot run on plain or grouped pairs ({reason})")
            skipped.append({"loss": name, "batch_size": None, "reason": reason})
            continue
        for batch_size in batches:
            batch = keyword_batch(variant, batch_size, dim)
            configs: list[tuple[dict, tuple | None]] = [({}, None)]
            pml = pml_steps(batch).get(name)
            if pml is not None and same_configuration(name, pml[1]):
                configs = [({}, pml)]
            elif pml is not None:
                configs.append((pml[1], pml))
            for params, oracle in configs:
                row = {"loss": name, "params": params, "batch_variant": variant, "batch_size": batch_size}
                row["ours_ms"] = timed_or_skipped(
                    ours_step(build_loss(name, **params), batch), repeats, row, skipped
                )
                if oracle is not None:
                    row["pml"] = oracle[0]
                    row["pml_ms"] = timed_or_skipped(oracle[2], repeats, {**row, "loss": oracle[0]}, skipped)
                    if row["ours_ms"] is not None and row["pml_ms"] is not None:
                        row["ours_over_pml"] = row["ours_ms"] / row["pml_ms"]
                rows.append(row)
                print(format_row(row), flush=True)
    return {"rows": rows, "skipped": skipped}


def timed_or_skipped(step: Callable[[], None], repeats: int, row: dict, skipped: list[dict]) -> float | None:
    """Median ms of ``step``, or None (with the reason appended to ``skipped``) if it runs out of memory."""
    try:
        return median_ms(step, repeats)
    except (RuntimeError, MemoryError) as error:
        message = str(error).splitlines()[0][:200]
        print(f"skip {row['loss']} {row['params']} at batch {row['batch_size']}: {message}")
        skipped.append(
            {"loss": row["loss"], "params": row["params"], "batch_size": row["batch_size"], "reason": message}
        )
        return None


def format_ms(value: float | None) -> str:
    return "  skipped" if value is None else f"{value:9.2f}"


def format_row(row: dict) -> str:
    label = row["loss"] + ("" if not row["params"] else str(row["params"]))
    text = f"{label:70.70s} {row['batch_variant']:8s} B={row['batch_size']:5d} {format_ms(row['ours_ms'])} ms"
    if "pml" in row:
        ratio = f"{row['ours_over_pml']:5.2f}" if "ours_over_pml" in row else "  n/a"
        text += f"  PML {format_ms(row['pml_ms'])} ms  ours/PML {ratio}  ({row['pml']})"
    return text


RESULTS = REPO_ROOT / "benchmarks" / "results" / "losses.json"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--memory-limit-gib", type=float, default=6.0, help="address-space growth cap; 0 = none"
    )
    parser.add_argument("--quick", action="store_true", help="batch 20, D 32, one repeat (a smoke test)")
    parser.add_argument("--output", type=Path, default=None, help=f"the results JSON (default {RESULTS}; --quick: none)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.dim, args.repeats = [4 * CAPTIONS_PER_IMAGE], 32, 1
    output = args.output or (None if args.quick else RESULTS)
    if args.repeats < 1 or args.dim < 1 or min(args.batches) < 2 * CAPTIONS_PER_IMAGE:
        parser.error(f"need --repeats >= 1, --dim >= 1 and batches >= {2 * CAPTIONS_PER_IMAGE}")
    limit_address_space(args.memory_limit_gib)
    torch.manual_seed(0)
    try:
        import pytorch_metric_learning

        pml_version = pytorch_metric_learning.__version__
    except ImportError:
        pml_version = None
        print("pytorch-metric-learning is not installed: no PML comparison")
    started = time.time()
    result = run(args.batches, args.dim, args.repeats)
    result["meta"] = {
        "torch": torch.__version__,
        "pytorch_metric_learning": pml_version,
        "threads": torch.get_num_threads(),
        "device": "cpu",
        "processor": platform.processor() or platform.machine(),
        "dim": args.dim,
        "repeats": args.repeats,
        "statistic": "median forward+backward wall time, ms",
        "seconds": round(time.time() - started, 1),
    }
    write_results(result, "", output, None)
    return result


if __name__ == "__main__":
    main()
