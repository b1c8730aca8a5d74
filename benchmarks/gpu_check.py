"""The GPU check: what to run first on a lent GPU, one call that proves the GPU path end to end (issue 38).

Parts (``--parts a,b,c,d``, the default; ``e`` with ``--bf16``), each with one summary line:

a. **equality**: CPU vs CUDA on a tiny batch (fp32, TF32 off; the CPU's own floor and bf16 beside it) and the
   CUDA-graph step vs the plain step (``gpu_equality.py``);
b. **speed**: the paper-profile step beside a bare torchvision ResNet-50 step at batches 64/128/256, 224 px,
   plain and graph-captured (``bench_step_vs_resnet.py``), and a profile of the captured step at 64;
c. **pipeline runs**: the whole smoke profile and the frozen demo, one FullRun each on one GPU with the default
   workers: exit status and wall time against the targets (smoke <= 60 s, demo <= 4 min), the GPU memory in use
   at its peak and each network family's largest task, and every network stage's ``_meta.json`` device
   (``gpu_check_runs.py``);
d. **CUDA tests**: ``pytest -m cuda -q`` (``tests/test_cuda.py``);
e. **bf16 vs fp32**: ``bf16_check.py``: the paper profile on 3,000 pairs, the same seeds in both precisions, the
   validation 5-way R@1 of bf16 against fp32 with its interval (a few minutes, so apart: ``--bf16``);
f. **the paper's regime**: the ``demo-gpu`` FullRun with ``--workers 8`` (target 6 minutes), its GPU memory and
   its report's headline, the report copied beside the JSON (``--demo-gpu``).

One JSON, ``benchmarks/results/gpu_check.json``: the commit, the device, torch, and every figure. The default
parts are sized for 8 minutes of one H100 or H200 (docs/gpu.md).

    python benchmarks/gpu_check.py                      # a CUDA host: a, b, c, d
    python benchmarks/gpu_check.py --parts c,e,f        # the runs issue 51 asks for: profiles, bf16, demo-gpu
    python benchmarks/gpu_check.py --cpu-lane           # no CUDA: what the CPU can prove, at toy sizes

Without CUDA and without ``--cpu-lane`` it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a GPU host runs a copy of the repository

import bench_step_vs_resnet  # noqa: E402
import bf16_check  # noqa: E402
import gpu_check_runs  # noqa: E402
from bench_train_throughput import build_trainer, synthetic_pairs  # noqa: E402
from gpu_equality import cpu_floor, equality, safe_step_profile, static_vs_plain  # noqa: E402
from result_files import commit, write_results  # noqa: E402

from pipeline.config.profiles import PROFILES  # noqa: E402

PAPER = PROFILES.get("paper").settings()

ROOT = Path(__file__).resolve().parent.parent
NO_CUDA = "no CUDA device was present: CPU lane only, no GPU figure"


def part_equality(args, settings, cuda: bool) -> tuple[dict, str]:
    if not cuda:
        floor = cpu_floor(args, settings)
        static = static_vs_plain(args, settings, torch.device("cpu"))
        return {"cpu_floor": floor, "static_vs_plain_cpu": static}, (
            f"equality ({NO_CUDA}): CPU 1 thread vs CPU first-step losses {floor['first_step_losses']:.1e}; "
            f"static (eager) vs plain step after {static['steps']} steps: parameters "
            f"{static['parameters_after_steps']:.1e}, first-step losses {static['losses_by_step'][0]:.1e}"
        )
    result = equality(args, settings, torch.device("cuda"))
    result["graphed_vs_plain_cuda"] = graphed = static_vs_plain(args, settings, torch.device("cuda"))
    cuda_fp32, floor = result["cuda_fp32"], result["cpu_fp32_1_thread"]
    return result, (
        f"equality: CUDA fp32 vs CPU first-step losses {cuda_fp32['first_step_losses']:.1e}, parameters after "
        f"{result['steps']} steps {cuda_fp32['parameters_after_steps']:.1e} (the CPU's own floor "
        f"{floor['parameters_after_steps']:.1e}); bf16 {result['cuda_bf16']['parameters_after_steps']:.1e}; "
        f"graphed vs plain (captured: {graphed['captured']}) losses of the last step "
        f"{graphed['losses_by_step'][-1]:.1e}, parameters after {graphed['steps']} steps "
        f"{graphed['parameters_after_steps']:.1e}"
    )


def part_speed(args, settings, cuda: bool) -> tuple[dict, str]:
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        batches, size, warmup, steps = args.batches, 224, args.warmup, args.steps
    else:
        batches, size, warmup, steps = [4], 32, 1, 2
    result = bench_step_vs_resnet.measure(batches, size, device, warmup, steps, args.pairs if cuda else 80, settings)
    line = bench_step_vs_resnet.summary(result)
    if cuda:
        graphed = replace(settings, image_size=224, batch_size=64, cuda_graphs=True)
        data = synthetic_pairs(256, 224, settings.max_text_tokens)
        with tempfile.TemporaryDirectory() as work:
            result["profile_graphed_64"] = profile = safe_step_profile(
                build_trainer(graphed, data, 192, Path(work), device)
            )
        bench_step_vs_resnet.release(device)
        if "error" not in profile:
            line += f"; captured step at 64: GPU busy {profile['gpu_busy_share']:.0%} of its wall time"
    else:
        line = f"{line} ({NO_CUDA}: toy sizes, no graphed step)"
    result["table"] = bench_step_vs_resnet.table_lines(result)
    return result, line


def part_runs(args, settings, cuda: bool) -> tuple[dict, str]:
    if cuda:
        result = gpu_check_runs.pipeline_runs("cuda", timeout=args.run_timeout)
        return result, gpu_check_runs.summary(result)
    # the CPU lane: the whole smoke profile with the default workers (the demo takes most of an hour on two cores)
    result = gpu_check_runs.pipeline_runs("cpu", timeout=args.run_timeout, profiles={"smoke": args.run_timeout})
    return result, f"{gpu_check_runs.summary(result)} ({NO_CUDA}: devices expected cpu, no target)"


def part_demo_gpu(args, settings, cuda: bool) -> tuple[dict, str]:
    root = Path(args.demo_gpu_root)
    if not cuda:  # the CPU lane proves the refusal: one line, exit 2, before any work
        command = gpu_check_runs.full_run_command(gpu_check_runs.DEMO_GPU, root)
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.run_timeout)
        refused = done.returncode == 2 and "needs a GPU" in done.stderr and "Traceback" not in done.stderr
        result = {"exit_status": done.returncode, "stderr": done.stderr.strip()[-500:], "ok": refused}
        return result, f"demo-gpu on a CPU host: {'refused in one line (exit 2)' if refused else 'NOT refused as it should be'}"
    result = gpu_check_runs.demo_gpu_run("cuda", root, max(args.run_timeout, 2 * gpu_check_runs.DEMO_GPU_TARGET_S))
    run = result[gpu_check_runs.DEMO_GPU]
    if "report" in run:  # the report beside the check's JSON: a lent GPU gives back only what is written there
        for name in ("report.md", "report.json"):
            shutil.copy(Path(run["report"]) / name, Path(args.out).with_name(f"demo_gpu_{name}"))
    return result, gpu_check_runs.summary(result)


def cuda_test_files() -> list[str]:
    """The test files that mark tests ``cuda``: only these are collected, since a GPU host often lacks what the
    others import (the API's fuzzing libraries, say) and one collection error would stop every CUDA test."""
    marked = (path for path in sorted((ROOT / "tests").glob("test_*.py")) if "mark.cuda" in path.read_text())
    return [str(path.relative_to(ROOT)) for path in marked]


def part_cuda_tests(args, settings, cuda: bool) -> tuple[dict, str]:
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", *cuda_test_files()]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.run_timeout)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", last)}
    result = {"exit_status": done.returncode, "counts": counts, "last_line": last.strip("= ")}
    if done.returncode != 0:
        result["log_tail"] = (done.stdout + done.stderr)[-4000:]
    note = "" if cuda else f" ({NO_CUDA}: every CUDA test is skipped)"
    return result, f"pytest -m cuda: exit {done.returncode}, {result['last_line']}{note}"


def part_bf16(args, settings, cuda: bool) -> tuple[dict, str]:
    argv = ["--out", str(Path(args.out).with_name("bf16_check.json"))]
    if not cuda:
        argv.append("--smoke")
    result = bf16_check.main(argv)
    return result, result["verdict"]


PARTS: dict[str, Callable] = {
    "a": part_equality,
    "b": part_speed,
    "c": part_runs,
    "d": part_cuda_tests,
    "e": part_bf16,
    "f": part_demo_gpu,
}
NAMES = {"a": "equality", "b": "speed", "c": "pipeline_runs", "d": "cuda_tests", "e": "bf16_vs_fp32", "f": "demo_gpu"}


def failed(name: str, result: dict) -> bool:
    if "error" in result:
        return True
    if name in ("c", "f"):
        return not result.get("ok", False)
    if name == "d":
        return result.get("exit_status") != 0
    return False


def main(argv: list[str] | None = None) -> None:
    """Exits 0 when every part ran and passed, 1 otherwise, 2 without CUDA or ``--cpu-lane``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=None, help="which parts, e.g. a,b (default a,b,c,d)")
    parser.add_argument("--bf16", action="store_true", help="also part e, the bf16-vs-fp32 check")
    parser.add_argument("--demo-gpu", action="store_true", help="also part f, the demo-gpu FullRun")
    parser.add_argument("--demo-gpu-root", default=str(ROOT / "runs_demo_gpu"), help="part f's run root (kept: its report)")
    parser.add_argument("--cpu-lane", action="store_true", help="no CUDA: run what the CPU can prove")
    parser.add_argument("--equality-steps", type=int, default=3)
    parser.add_argument("--replay-steps", type=int, default=5, help="graph replays compared in part a")
    parser.add_argument("--tiny-image-size", type=int, default=64)
    parser.add_argument("--tiny-batch-size", type=int, default=16)
    parser.add_argument("--tiny-pairs", type=int, default=96)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per rate in part b")
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=640, help="synthetic cache rows in part b")
    parser.add_argument("--run-timeout", type=float, default=420, help="the longest one FullRun of part c may take")
    parser.add_argument("--out", default="benchmarks/results/gpu_check.json")
    parser.add_argument("--commit", default=None, help="the commit checked, where the copy has no .git (a lent GPU)")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_lane:
        print("gpu_check: no CUDA device here; run it on a machine with a GPU (or --cpu-lane)", file=sys.stderr)
        raise SystemExit(2)
    if not cuda:  # the CPU lane's toy sizes: only that the code runs is proven there
        args.tiny_image_size, args.tiny_batch_size, args.tiny_pairs = 32, 8, 48
        args.equality_steps, args.replay_steps = 2, 2
    parts = (args.parts or "a,b,c,d").split(",") + (["e"] if args.bf16 else []) + (["f"] if args.demo_gpu else [])
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise SystemExit(f"gpu_check: unknown parts {unknown}; choose from {sorted(PARTS)}")
    # the paper profile, untrained weights: neither the equality nor the speed depends on them
    settings = replace(PAPER.train, pretrained=False, selection="val_loss")
    if not cuda:  # a ResNet-18 with small towers: the CPU lane's parts a and b run in seconds
        settings = replace(settings, backbone="resnet18", embed_dim=32, gru_hidden=32)
    result = {
        "commit": args.commit or commit(),
        "device": torch.cuda.get_device_name(0) if cuda else f"CPU ({NO_CUDA})",
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "cpu_lane": not cuda,
        "parts": {},
        "summary": {},
        "seconds": {},
    }
    for name in dict.fromkeys(parts):
        started = time.perf_counter()
        try:
            figures, line = PARTS[name](args, settings, cuda)
        except Exception as error:  # noqa: BLE001 - one part's failure must not cost the others' figures
            figures, line = {"error": repr(error)}, f"FAILED: {error!r}"
        result["parts"][NAMES[name]] = figures
        result["summary"][name] = f"({name}) {NAMES[name]}: {line}"
        result["seconds"][name] = round(time.perf_counter() - started, 1)
        print(result["summary"][name], f"[{result['seconds'][name]:.0f} s]", flush=True)
        write_results(result, "", args.out, None)  # after every part: a lease that ends mid-check keeps what was measured
    result["ok"] = not any(failed(name, result["parts"][NAMES[name]]) for name in dict.fromkeys(parts))
    write_results(result, "", args.out, None)
    total = sum(result["seconds"].values())
    print(f"gpu_check on {result['device']} at {result['commit']}: {'ok' if result['ok'] else 'FAILED'} in {total:.0f} s -> {args.out}")
    raise SystemExit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
