"""The base of every task: gokart-style output paths that hash the task's significant configuration and its
upstream tasks, atomic directory outputs, a metadata JSON beside each output, the code lineage that tells an
output of today's code from an older one, and where a task that runs a network produces.

The engine knows nothing of the project's settings: a task says what it depends on (:meth:`HashedTask.config`,
:meth:`HashedTask.requires`) and the engine names, builds, locks and records its output.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

import luigi

from common.hashing import stable_hash
from common.run_folder import CODE_MARKER, META_FILE, read_meta
from pipeline.engine.code_versions import version_of
from pipeline.engine.gpus import host_gpu_count
from pipeline.engine.outputs import (
    atomic_directory,
    library_versions,
    output_lock,
    read_json,
    read_output,
    remove_abandoned_partials,
    write_json,
)
from pipeline.engine.spawn import produce_in_own_process, runs_in_own_process

__all__ = ["CODE_MARKER", "META_FILE", "HashedTask", "stable_hash", "threads_per_worker"]

logger = logging.getLogger("luigi-interface")


def _name(task: HashedTask) -> str:
    """``<Task>/<signature>``: how an output names another (its inputs, its dynamic dependencies)."""
    return f"{task.get_task_family()}/{task.signature()}"


def _names(tasks: list[HashedTask]) -> list[str]:
    """``<Task>/<signature>`` of each task, sorted (what an output records of its dynamic dependencies)."""
    return sorted({_name(task) for task in tasks})


def threads_per_worker() -> int:
    """CPU threads one task may use: the cores shared among Luigi's workers (``[core] workers`` or
    ``--workers``), so two trainings side by side do not oversubscribe the machine. ``OMP_NUM_THREADS``, when
    set, wins (the user's say)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return max(1, (os.cpu_count() or 1) // max(1, luigi.interface.core().workers))


class HashedTask(luigi.Task):
    """A task whose output is a directory ``<run_root>/<TaskName>/<signature>/``.

    The signature hashes :meth:`config` (the settings this task really uses, resolved from the profile)
    and the signatures of the tasks it requires, so an ablation reuses every unaffected upstream output and
    a changed setting never overwrites an old result. Subclasses implement :meth:`config` and
    :meth:`produce`; the directory is renamed into place only after ``produce`` returns, then a
    ``_meta.json`` (config, versions, seed, wall time, summary) marks it complete.
    """

    run_root = luigi.Parameter(default="runs", significant=False, description="where outputs are written")
    keep_stale = luigi.BoolParameter(
        default=False,
        significant=False,
        description="take an output made by an older version of its code as done (the report names it) "
        "instead of recomputing it and its downstream",
    )

    #: keep a killed run's partial output (checkpoints) and resume from it
    resumable = False
    #: the task runs a network (an image trunk, a trained model): on a GPU host it may produce in a process of
    #: its own (:mod:`pipeline.engine.spawn`), and its summary says the ``device`` it ran on, which the
    #: output's ``_meta.json`` records
    runs_network: ClassVar[bool] = False
    #: the files this task writes, by name: other tasks read them only through :meth:`load` (or
    #: :meth:`output_path`) of a task they require, never by a file name of their own
    outputs: ClassVar[dict[str, str]] = {}

    def config(self) -> dict[str, Any]:
        """The settings this task's output depends on (besides its inputs)."""
        return {}

    def process_params(self) -> dict[str, str]:
        """The parameters another process rebuilds this task from (a network task's own process, a torchrun
        rank) and its ``_meta.json`` records: all of them by default."""
        return self.to_str_params()

    def identity_extras(self) -> dict[str, Any]:
        """What else the output depends on besides :meth:`config` and its inputs (a tokenizer's version)."""
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
                **self.identity_extras(),
            }
            cached = self._signature = stable_hash(payload)
        return cached

    def dynamic_upstream(self) -> list[HashedTask]:
        """The tasks this task yields while it runs (Luigi dynamic dependencies), as far as the outputs there
        now tell (they may read this task's or its inputs' outputs); none by default. They count for
        completeness and for the code lineage like ``requires()``."""
        return []

    def _known_dynamic(self) -> list[HashedTask] | None:
        """:meth:`dynamic_upstream`, or None when it cannot be read now (an output it reads is missing)."""
        try:
            return list(self.dynamic_upstream())
        except (OSError, KeyError, ValueError, IndexError):
            return None

    def _lineage_inputs(self) -> tuple[list[HashedTask], bool]:
        """Every task whose output this one is made from (its requirements and its known dynamic ones), and
        whether the dynamic ones could be read (what depends on them is cached only then: they become readable
        once this task has run)."""
        dynamic = self._known_dynamic()
        return self._inputs_with(dynamic or []), dynamic is not None

    def _inputs_with(self, dynamic: list[HashedTask]) -> list[HashedTask]:
        """This task's requirements and ``dynamic``, each output once."""
        return list({task.output_dir(): task for task in [*self.upstream(), *dynamic]}.values())

    def _code_over(self, version: int, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """The code record of an output of this family at ``version`` made from inputs with these code
        records: ``lineage`` (a hash of the versions along every path into it) and ``versions`` (family ->
        version, this family's and every family upstream)."""
        family = self.get_task_family()
        versions: dict[str, int] = {}
        for code in inputs:
            versions.update(code.get("versions", {}))
        versions[family] = version
        upstream = sorted(code["lineage"] for code in inputs)
        return {"lineage": stable_hash({"version": version, "upstream": upstream}), "versions": versions}

    def code(self, version: Any = version_of) -> dict[str, Any]:
        """This output's code record under ``version`` (family -> version; today's by default): what
        ``_meta.json`` holds when every input was made by that code (``pipeline.engine.code_identity``)."""
        cache = self.__dict__.setdefault("_code", {})
        if version in cache:
            return cache[version]
        inputs, known = self._lineage_inputs()
        code = self._code_over(version(self.get_task_family()), [task.code(version) for task in inputs])
        if known:
            cache[version] = code
        return code

    def produced_code(self, inputs: list[HashedTask]) -> dict[str, Any]:
        """The code record of an output made now from ``inputs``: today's version of its family over the
        records its inputs *hold*. An input kept from older code (``--keep-stale``) so passes its age on, and a
        later run without the flag finds this output stale too."""
        recorded = [task.meta()["code"] for task in inputs]
        return self._code_over(version_of(self.get_task_family()), recorded)

    def stale_reason(self) -> str | None:
        """Why this task's existing output was made by other code than today's (None: it was not, or it
        does not exist): the families whose version differs, e.g. ``code: Train 1 -> 2``."""
        meta = self._readable_meta()
        if meta is None:
            return None
        recorded = meta["code"]
        now = self.code()
        if recorded["lineage"] == now["lineage"]:
            return None
        was = recorded.get("versions", {})
        changed = [
            f"{family} {was.get(family, '?')} -> {version}"
            for family, version in now["versions"].items()
            if was.get(family) != version
        ]
        return "code: " + (", ".join(changed) or "an input was made by older code")

    def complete(self) -> bool:
        """Whether this output can be taken as it is (:meth:`incomplete_reason` says why not)."""
        return self.incomplete_reason() is None

    def incomplete_reason(self) -> str | None:
        """Why this output must be made (again), None when it is complete: it exists with a readable
        ``_meta.json`` (a damaged one is made again in place), was made by today's code (or ``--keep-stale``
        keeps an older one), from the dynamic dependencies it has now, and every output it was made from is
        complete and is the very one it was made from (``_meta.json``'s ``inputs``: an input made again since,
        e.g. deleted and rebuilt, makes this one again too). So a finished root is complete only when everything
        under it is, and ``python -m pipeline plan`` and the run agree on what runs."""
        return self._incomplete_reason({})

    def _incomplete_reason(self, seen: dict[str, str | None]) -> str | None:
        """:meth:`incomplete_reason`, each output of the graph judged once per call (``seen``)."""
        if self.task_id in seen:
            return seen[self.task_id]
        seen[self.task_id] = reason = self._judged(seen)
        return reason

    def _judged(self, seen: dict[str, str | None]) -> str | None:
        if not self.output().exists():
            return "no output yet"
        meta = self._readable_meta()
        if meta is None:
            logger.warning("%s: its %s is damaged: making it again", self.output_dir(), META_FILE)
            return f"its {META_FILE} is damaged"
        if not self.keep_stale and (stale := self.stale_reason()) is not None:
            return stale
        dynamic = self._known_dynamic()
        if dynamic is None:
            return "the outputs its dynamic dependencies are read from are not all there"
        # the output must be made from these dynamic dependencies: a setting they hash but this task does not
        # makes it again, in place
        made_from = meta.get("dynamic")
        if made_from is not None and made_from != _names(dynamic):
            return "made from other dynamic dependencies than the settings now give"
        recorded = meta.get("inputs")
        for task in self._inputs_with(dynamic):
            if task._incomplete_reason(seen) is not None:
                return f"its input {_name(task)} will be made again"
            # an output recorded before builds were (no ``inputs``) predates every input that has a build
            if (recorded.get(_name(task)) if isinstance(recorded, dict) else None) != task.build_id():
                return f"its input {_name(task)} was made again since"
        return None

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
        # one process at a time builds this output (pipeline.engine.outputs.output_lock): a second run on the same run
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
                self._start_with_todays_code(work_dir)
                summary = self._produce_where_it_may(work_dir)
                dynamic = self._known_dynamic()  # they have run by now
                inputs = self._inputs_with(dynamic or [])
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
                        "params": self.process_params(),
                        "upstream": {
                            task.get_task_family(): str(task.output_dir()) for task in self.upstream()
                        },
                        "versions": library_versions(),
                        "code": self.produced_code(inputs),
                        **({"device": summary.get("device", "cpu")} if self.runs_network else {}),
                        **({"dynamic": _names(dynamic)} if dynamic else {}),
                        # this build, and the build of each output it was made from: one made again later (deleted
                        # and rebuilt) makes this one incomplete
                        "build": uuid.uuid4().hex,
                        "inputs": {_name(task): task.build_id() for task in inputs},
                        "wall_time_s": round(time.time() - started, 3),
                        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "summary": summary,
                    },
                )

    @property
    def resources(self) -> dict[str, int]:
        """A network task takes one unit of Luigi's ``gpu`` resource on a GPU host (``[resources] gpu`` says how
        many a scheduler hands out, and so how many share the host's GPUs: :mod:`pipeline.engine.gpus`);
        nothing on CPU, where Luigi would count an undeclared resource as 1 and run them one at a time."""
        return {"gpu": 1} if self.runs_network and host_gpu_count() else {}

    def runs_in_own_process(self) -> bool:
        """Whether :meth:`produce` runs in a process of its own (:mod:`pipeline.engine.spawn`)."""
        return self.runs_network and runs_in_own_process()

    def _produce_where_it_may(self, work_dir: Path) -> dict[str, Any]:
        if self.runs_in_own_process():
            return produce_in_own_process(self, work_dir, threads_per_worker())
        return self.produce(work_dir)

    def _start_with_todays_code(self, work_dir: Path) -> None:
        """A resumable task's work folder kept from a killed run of other code is emptied (its checkpoints
        would resume yesterday's computation); the folder then records today's lineage."""
        if not self.resumable:
            return  # its work folder always starts empty
        marker = Path(work_dir) / CODE_MARKER
        lineage = self.code()["lineage"]
        if any(Path(work_dir).iterdir()):
            try:
                kept = read_json(marker)["code"]["lineage"]
            except (OSError, ValueError, RecursionError, KeyError, TypeError):  # missing or damaged: other code
                kept = None
            if kept != lineage:
                logger.warning("%s: its partial output was made by other code: starting again", self.task_id)
                for child in Path(work_dir).iterdir():
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        write_json(marker, {"code": self.code()})

    def meta(self) -> dict[str, Any]:
        """The output's ``_meta.json`` (read once per version of the file: completeness asks often)."""
        path = self.output_dir() / META_FILE
        stat = os.stat(path)
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        cached = self.__dict__.get("_meta_read")
        if cached is None or cached[0] != stamp:
            cached = self._meta_read = (stamp, read_meta(self.output_dir()))
        return cached[1]

    def _readable_meta(self) -> dict[str, Any] | None:
        """:meth:`meta`, None when it is missing or damaged (not JSON, not an object, or without the code record
        every output's ``_meta.json`` holds)."""
        try:
            meta = self.meta()
        except (OSError, ValueError, RecursionError):
            return None
        code = meta.get("code") if isinstance(meta, dict) else None
        return meta if isinstance(code, dict) and isinstance(code.get("lineage"), str) else None

    def build_id(self) -> str | None:
        """The id of the build that made this output (None: none recorded, or no output)."""
        meta = self._readable_meta()
        return meta.get("build") if meta is not None else None
