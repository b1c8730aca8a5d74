"""The base of every task: gokart-style output paths that hash the task's significant configuration
and its upstream tasks, atomic directory outputs, and a metadata JSON beside each output.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import luigi

from common.tokenizer import TOKENIZER_VERSION
from pipeline.io import (
    atomic_directory,
    library_versions,
    output_lock,
    read_json,
    read_output,
    remove_abandoned_partials,
    write_json,
)
from pipeline.profiles import Profile, get_profile

META_FILE = "_meta.json"

logger = logging.getLogger("luigi-interface")


def threads_per_worker() -> int:
    """CPU threads one task may use: the cores shared among Luigi's workers (``[core] workers`` or
    ``--workers``), so two trainings side by side do not oversubscribe the machine. ``OMP_NUM_THREADS``, when
    set, wins (the user's say)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return max(1, (os.cpu_count() or 1) // max(1, luigi.interface.core().workers))


def stable_hash(payload: Any, length: int = 12) -> str:
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


class HashedTask(luigi.Task):
    """A task whose output is a directory ``<run_root>/<TaskName>/<signature>/``.

    The signature hashes :meth:`config` (the settings this task really uses, resolved from the profile)
    and the signatures of the tasks it requires, so an ablation reuses every unaffected upstream output and
    a changed setting never overwrites an old result. Subclasses implement :meth:`config` and
    :meth:`produce`; the directory is renamed into place only after ``produce`` returns, then a
    ``_meta.json`` (config, versions, seed, wall time, summary) marks it complete.
    """

    run_root = luigi.Parameter(default="runs", significant=False, description="where outputs are written")
    profile = luigi.Parameter(default="demo", description="smoke | demo | paper (see pipeline/profiles.py)")

    #: keep a killed run's partial output (checkpoints) and resume from it
    resumable = False
    #: the task reads texts through ``common.tokenizer``: its version is part of the output hash, so a run
    #: root never reuses an output made with other tokens
    tokenizes = False
    #: the files this task writes, by name: other tasks read them only through :meth:`load` (or
    #: :meth:`output_path`) of a task they require, never by a file name of their own
    outputs: ClassVar[dict[str, str]] = {}

    @property
    def settings(self) -> Profile:
        return get_profile(self.profile)

    def config(self) -> dict[str, Any]:
        """The settings this task's output depends on (besides its inputs)."""
        return {}

    def upstream(self) -> list[HashedTask]:
        return [task for task in luigi.task.flatten(self.requires()) if isinstance(task, HashedTask)]

    def signature(self) -> str:
        cached = getattr(self, "_signature", None)
        if cached is None:
            payload = {
                "task": self.get_task_family(),
                "config": self.config(),
                "upstream": sorted(task.signature() for task in self.upstream()),
                **({"tokenizer": TOKENIZER_VERSION} if self.tokenizes else {}),
            }
            cached = self._signature = stable_hash(payload)
        return cached

    def output_dir(self) -> Path:
        return Path(self.run_root) / self.get_task_family() / self.signature()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(str(self.output_dir() / META_FILE))

    def output_path(self, name: str) -> Path:
        """Where declared output ``name`` is (or will be, inside ``produce``'s work dir: see :meth:`work_path`)."""
        return self.output_dir() / self._file_of(name)

    def work_path(self, work_dir: Path, name: str) -> Path:
        """Where ``produce`` writes declared output ``name``."""
        return Path(work_dir) / self._file_of(name)

    def load(self, name: str, *, missing_ok: bool = False, **options: Any) -> Any:
        """Declared output ``name``, read by its kind (``.npy`` -> array, ``options`` such as ``mmap_mode``
        passed to ``np.load``; ``.json``; ``.parquet`` / ``.csv`` -> DataFrame). With ``missing_ok``, an
        optional output the task did not write (e.g. a recipe without ground truth) gives None."""
        path = self.output_path(name)
        if missing_ok and not path.exists():
            return None
        return read_output(path, **options)

    def _file_of(self, name: str) -> str:
        if name not in self.outputs:
            raise KeyError(
                f"{self.get_task_family()} declares no output {name!r}; it declares {sorted(self.outputs)}"
            )
        return self.outputs[name]

    def produce(self, work_dir: Path) -> dict[str, Any]:  # pragma: no cover - interface
        """Write this task's files into ``work_dir``; return a small JSON-able summary."""
        raise NotImplementedError

    def run(self) -> None:
        import torch  # imported here: the scheduler process never needs it

        torch.set_num_threads(threads_per_worker())
        # one process at a time builds this output (pipeline.io.output_lock): a second run on the same run
        # root that scheduled this task too waits here, then takes the first one's output as it is
        with output_lock(self.output_dir()):
            if self.complete():
                logger.info("%s: produced by another process while this one waited", self.task_id)
                return
            if not self.resumable:
                for partial in remove_abandoned_partials(self.output_dir().parent, self.output_dir()):
                    logger.info("%s: removed the abandoned partial output %s", self.task_id, partial)
            started = time.time()
            with atomic_directory(self.output_dir(), resume=self.resumable) as work_dir:
                summary = self.produce(work_dir)
                write_json(
                    work_dir / META_FILE,
                    {
                        "task": self.get_task_family(),
                        "task_id": self.task_id,
                        "signature": self.signature(),
                        "config": self.config(),
                        # the file of each declared output, so readers of a run tree (crossmodal export) ask
                        # the task instead of spelling its file names again
                        "outputs": dict(self.outputs),
                        "params": {name: str(value) for name, value in self.param_kwargs.items()},
                        "upstream": {
                            task.get_task_family(): str(task.output_dir()) for task in self.upstream()
                        },
                        "versions": library_versions(),
                        "wall_time_s": round(time.time() - started, 3),
                        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "summary": summary,
                    },
                )

    def meta(self) -> dict[str, Any]:
        return read_json(self.output_dir() / META_FILE)
