"""The text tower's GRU on the CPU: ``nn.GRU`` over a packed batch against ``models.recurrent`` (the same
equations stepped without per-step slices of the whole input), forward + backward, and a whole demo
training step with each. Blocks of the two are interleaved, so load from other processes falls on both;
the table gives medians and the ratio. Both give the same states and gradients (``tests/test_recurrent.py``).

    python benchmarks/bench_gru.py                    # the demo's shapes: 200-d words, GRU 256, batch 64
    python benchmarks/bench_gru.py --quick            # one block of 2 steps: seconds, a smoke test (no file)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

import models.encoders
from models.recurrent import gru_final_states

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step_sync import build_trainer  # noqa: E402
from result_files import add_out_option, out_path, write_results  # noqa: E402


def native(gru: nn.GRU, packed) -> torch.Tensor:
    return gru(packed)[1]


def gru_block(implementation, gru: nn.GRU, words: torch.Tensor, lengths: torch.Tensor, repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        packed = pack_padded_sequence(words, lengths, batch_first=True, enforce_sorted=False)
        implementation(gru, packed).sum().backward()
    return (time.perf_counter() - started) / repeats


def step_block(implementation, trainer, batches: list) -> float:
    with mock.patch.object(models.encoders, "gru_final_states", implementation):
        started = time.perf_counter()
        for plan, loaded in batches:
            trainer.train_step(plan, loaded)
        return (time.perf_counter() - started) / len(batches)


RESULTS = "benchmarks/results/gru.json"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a Luigi worker gets 1 here)")
    parser.add_argument("--quick", action="store_true", help="one block of 2 steps and 2 GRU passes (a smoke test)")
    add_out_option(parser, RESULTS)
    args = parser.parse_args(argv)
    steps, repeats = (2, 2) if args.quick else (10, 5)
    if args.quick:
        args.blocks = 1
    out = out_path(args, RESULTS)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gru = nn.GRU(200, 256, batch_first=True)
    words = torch.randn(64, 64, 200, requires_grad=True)
    lengths = torch.from_numpy(np.random.default_rng(0).integers(20, 65, 64))
    implementations = {"nn.GRU (packed)": native, "models.recurrent": gru_final_states}
    times: dict[str, dict[str, list[float]]] = {"gru": {}, "step": {}}
    with tempfile.TemporaryDirectory() as work:
        trainer = build_trainer(Path(work), torch.device("cpu"), n=64 * steps)
        batches = list(trainer.loader(list(trainer.epoch_plans())[:steps], trainer.host_batch))
        for implementation in implementations.values():  # warm-up
            gru_block(implementation, gru, words, lengths, 2)
            step_block(implementation, trainer, batches[:2])
        for _ in range(args.blocks):
            for name, implementation in implementations.items():
                times["gru"].setdefault(name, []).append(gru_block(implementation, gru, words, lengths, repeats))
                times["step"].setdefault(name, []).append(step_block(implementation, trainer, batches))
    result = {"threads": args.threads, "blocks": args.blocks, "median_ms": {}, "native_vs_recurrent": {}}
    print("| measured | nn.GRU (packed) ms | models.recurrent ms | ratio |\n|---|---|---|---|")
    for what, label in (("gru", "GRU 200->256, batch 64, 20-64 tokens, fwd+bwd"), ("step", "demo training step (Ours)")):
        medians = {name: 1000 * float(np.median(values)) for name, values in times[what].items()}
        ratio = medians["nn.GRU (packed)"] / medians["models.recurrent"]
        result["median_ms"][what] = {name: round(value, 1) for name, value in medians.items()}
        result["native_vs_recurrent"][what] = round(ratio, 2)
        print(f"| {label} | {medians['nn.GRU (packed)']:.1f} | {medians['models.recurrent']:.1f} | {ratio:.2f}x |")
    write_results(result, "", out, None)
    return result


if __name__ == "__main__":
    main()
