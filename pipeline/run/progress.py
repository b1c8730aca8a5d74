"""A live view of a run against its plan, read from the file system alone.

Why files: Luigi builds tasks in forked workers, so task events would need a channel back from each, and
workers writing to one terminal interleave. Every task already publishes its state as files (a
``.partial`` folder while built, a Train's ``history.csv`` there after each epoch, ``_meta.json`` once
done: see ``pipeline.engine.task``), so one thread of the main process polls them and alone writes the terminal.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

# the run folder's layout and readers: files alone, so this module imports neither Luigi nor the models
from common.files import PARTIAL_SUFFIX
from common.run_folder import META_FILE, last_history_row, meta_or_none, partial_path

logger = logging.getLogger(__name__)

TRAIN = "Train"
DATA = ("PrepareShard", "PrepareDataset", "Deduplicate", "Split")
REPRESENTATIONS = ("TrainDoc2Vec", "TrainWordVectors", "TrunkFeatures", "NeighborTables")
#: the order stages are shown in (a family not named here comes last)
FAMILY_ORDER = (*DATA, *REPRESENTATIONS, TRAIN, *"Tune TunedRuns Evaluate Cocos SearchIndex Report".split())
#: families shown as one stage: their own counts say little to a reader of the status line
STAGE_OF = {**dict.fromkeys(DATA, "data"), **dict.fromkeys(REPRESENTATIONS, "representations")}
#: running trainings shown one per line, at most (the others are counted on the last one)
MAX_RUNNING_LINES = 2

Identity = tuple[int, int]


@dataclass(frozen=True)
class WatchedTask:
    """A task of the plan: where its output appears, and how to name it."""

    family: str  # "Train", "Evaluate", "PrepareDataset", ...
    output_dir: Path  # final folder (its .partial sibling is where it is built)
    label: str  # e.g. "ours seed 1" for a Train, "" when nothing useful
    max_epochs: int | None = None  # Trains only
    metric: str | None = None  # Trains only: the history.csv column shown, e.g. "val_nway_r1"
    metric_label: str | None = None  # e.g. "val 5-way R@1"
    pending: bool = True  # False when it was already done (or reused) at start


@dataclass(eq=False)
class _State:
    """A task to run as this run has seen it so far."""

    task: WatchedTask
    discovered: bool = False  # a Train the plan did not name (a tuning step)
    touched: bool = False  # its .partial folder changed since start: it is being built
    done: bool = False
    epoch: int | None = None  # a running training's last epoch in history.csv (0 before the first)
    metric: float | None = None


def _identities(final: Path) -> tuple[Identity | None, Identity | None]:
    """(inode, mtime) of an output's ``_meta.json`` and of its ``.partial`` folder, None where absent: an
    output rebuilt in place has a new ``_meta.json``, a folder written into a new mtime."""
    found: list[Identity | None] = []
    for path in (final / META_FILE, partial_path(final)):
        try:
            stat = os.stat(path)
        except OSError:
            found.append(None)
        else:
            found.append((stat.st_ino, stat.st_mtime_ns))
    return found[0], found[1]


def _number(value: float) -> str:
    """A metric compactly: ``.52`` for a rate (as papers print recalls), ``245.33`` otherwise."""
    return f"{value:.2f}".replace("0.", ".", 1) if abs(value) < 1 else f"{value:.2f}"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _tasks(count: int) -> str:
    return f"{count} task" if count == 1 else f"{count} tasks"


def _family_key(family: str) -> tuple[int, str]:
    return (FAMILY_ORDER.index(family), "") if family in FAMILY_ORDER else (len(FAMILY_ORDER), family)


class ProgressDisplay:
    """The run's progress on ``stream``: a tqdm bar of the trainings and status lines redrawn in place on a
    terminal ("live"), one line per finished task elsewhere ("plain": CI, a log file), or nothing ("off").
    A daemon thread polls every ``interval`` seconds; :meth:`poll` is that step, callable directly."""

    def __init__(
        self,
        tasks: Sequence[WatchedTask],
        *,
        run_root: Path,
        stream: TextIO = sys.stderr,
        mode: str = "auto",
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in ("auto", "live", "plain", "off"):
            raise ValueError(f"mode must be auto, live, plain or off, not {mode!r}")
        if mode == "auto":
            mode = "live" if getattr(stream, "isatty", lambda: False)() else "plain"
        self.mode, self.tasks, self.run_root = mode, list(tasks), Path(run_root)
        self._stream, self._interval, self._clock = stream, interval, clock
        # a tuning step shows the metric of the planned trainings: it is selected by the same one
        metrics = [(t.metric, t.metric_label) for t in self.tasks if t.family == TRAIN and t.metric]
        self._train_metric = metrics[0] if metrics else (None, None)
        self._train_names = {task.output_dir.name for task in self.tasks if task.family == TRAIN}
        # identities at start (_identities): an old output or a killed run's .partial is not this run's work
        self._baseline: dict[Path, tuple[Identity | None, Identity | None]] = {}
        self._states: dict[Path, _State] = {}
        self._train_walls: list[float] = []  # this run's finished Trains
        self._peak_parallel, self._stopped = 1, False
        self._started_at: float | None = None
        self._lock, self._stop_event = threading.RLock(), threading.Event()  # a poll looks and draws as one
        self._thread: threading.Thread | None = None
        self._bars: list[Any] = []  # live mode: the tqdm bar, then one per status line

    def start(self, *, background: bool = True) -> ProgressDisplay:
        """Take stock of what is on disk now, say so, and poll in a daemon thread (else the caller polls)."""
        with self._lock:
            if self._started_at is not None or self._stopped:
                return self
            self._begin()
            if self.mode == "plain":
                to_run, reused = sum(t.pending for t in self.tasks), sum(not t.pending for t in self.tasks)
                self._write([f"{self._stamp()} start: {_tasks(to_run)} to run, {reused} already done"])
            elif self.mode == "live":
                self._draw_live([])
        if background and self.mode != "off":
            # Luigi forks its workers while this thread may be writing: a fork in the middle of a write would
            # leave the child a held stream lock; forks wait for a draw to end instead
            os.register_at_fork(before=self._lock.acquire, after_in_parent=self._lock.release, after_in_child=self._lock.release)
            self._thread = threading.Thread(target=self._loop, name="progress-display", daemon=True)
            self._thread.start()
        return self

    def stop(self, success: bool | None = None) -> None:
        """Stop polling and draw the final state, once (later calls do nothing). ``success`` False (the run
        failed) reads "stopped" even when every watched output is there."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._started_at is None or self.mode == "off" or not self._lock.acquire(timeout=2.0):
            return
        try:
            finished, running = self._observe()
            done, total = sum(s.done for s in self._states.values()), len(self._states)
            ok = done == total and success is not False
            ending = f"finished: {_tasks(total)} run" if ok else f"stopped: {done} of {_tasks(total)} done"
            unfinished = [line for line in [self._unfinished()] if line and not ok]
            if self.mode == "plain":
                self._write([*finished, f"{self._stamp()} {'; '.join([ending, *unfinished])}"])
            else:
                self._draw_live(running, ending)
                for bar in sorted(self._bars, key=lambda bar: bool(bar.desc)):  # blank lines cleared first
                    bar.leave = bool(bar.desc)
                    bar.close()
                self._write(unfinished)  # below the display, whole: a line of it is cut to the terminal
        except (OSError, ValueError):  # a closed stream at interpreter exit: nothing left to show
            logger.debug("progress display: final draw failed", exc_info=True)
        finally:
            self._lock.release()

    def __enter__(self) -> ProgressDisplay:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        self.stop(success=exc_type is None)

    def poll(self) -> list[str]:
        """Look at the file system once and draw: the lines written (plain: one per task finished since the
        last poll, never again) or now on screen (live); [] with mode "off", before start or after stop."""
        with self._lock:
            if self.mode == "off" or self._stopped or self._started_at is None:
                return []
            finished, running = self._observe()
            if self.mode == "live":
                return self._draw_live(running)
            self._write(finished)
            return finished

    def _loop(self) -> None:
        while not self._stop_event.wait(self._interval):
            try:
                self.poll()
            except Exception:  # a display must never take the run down
                logger.debug("progress display: poll failed", exc_info=True)

    def _begin(self) -> None:
        self._started_at = self._clock()
        self._states = {task.output_dir: _State(task) for task in self.tasks if task.pending}
        finals = [*self._states, *(self.run_root / TRAIN / name for name in self._train_entries())]
        self._baseline = {final: _identities(final) for final in finals}

    def _train_entries(self) -> set[str]:
        """Signatures with a final or ``.partial`` folder under ``<run_root>/Train`` (no locks, temp files)."""
        try:
            names = [entry.name.removesuffix(PARTIAL_SUFFIX) for entry in os.scandir(self.run_root / TRAIN)]
        except OSError:
            return set()
        return {name for name in names if "." not in name}

    def _changed(self, final: Path) -> tuple[bool, bool]:
        """Whether ``final``'s ``_meta.json``, and its ``.partial`` folder, exist and differ from at start."""
        now, then = _identities(final), self._baseline.get(final, (None, None))
        return now[0] is not None and now[0] != then[0], now[1] is not None and now[1] != then[1]

    def _observe(self) -> tuple[list[str], list[_State]]:
        """One look (the caller holds the lock): the lines of the tasks finished since the last look, and
        the tasks running. A Train the plan did not name (the tuned protocol decides some as it runs) whose
        folder appeared or changed since start joins the trainings: the count's denominator grows."""
        for name in sorted(self._train_entries() - self._train_names):
            final = self.run_root / TRAIN / name
            if any(self._changed(final)):
                metric, metric_label = self._train_metric
                task = WatchedTask(TRAIN, final, f"{name} (tuning)", metric=metric, metric_label=metric_label)
                self._states[final] = _State(task, discovered=True)
                self._train_names.add(name)
        finished, running = [], []
        for state in (state for state in self._states.values() if not state.done):
            final = state.task.output_dir
            meta_changed, partial_changed = self._changed(final)
            if meta_changed:
                finished.append(state)
                continue
            state.touched = state.touched or partial_changed
            if not state.touched or not partial_path(final).exists():
                continue
            if state.task.family == TRAIN:
                last = last_history_row(partial_path(final), state.task.metric)
                if last is not None:  # unreadable this tick: keep what the last one read
                    state.epoch, state.metric = last
            running.append(state)
        self._peak_parallel = max(self._peak_parallel, sum(s.task.family == TRAIN for s in running))
        finished.sort(key=lambda state: _family_key(state.task.family))
        return [self._finish(state) for state in finished], running

    def _finish(self, state: _State) -> str:
        """Mark done; the line saying so: "Train 12/35 done: ours seed 1 (best epoch 7 of 20, 41 s)"."""
        state.done = True
        meta = meta_or_none(state.task.output_dir) or {}  # unreadable: it is done all the same, said without details
        task, params, wall = state.task, meta.get("params"), meta.get("wall_time_s")
        summary = meta.get("summary") if isinstance(meta.get("summary"), dict) else {}
        if state.discovered:  # named by its parameters now, else by its folder
            known = isinstance(params, dict) and "variant" in params
            seed = f" seed {params['seed']}" if known and "seed" in params else ""
            name = f"{params['variant']}{seed}" if known else task.output_dir.name
            task = state.task = replace(task, label=name)
        details = ["tuning step"] if state.discovered else []
        if task.family == TRAIN and summary.get("best_epoch") is not None:
            of = summary.get("max_epochs") or task.max_epochs
            details.append(f"best epoch {summary['best_epoch']}" + (f" of {of}" if of else ""))
        if isinstance(wall, (int, float)):
            details.append(_duration(wall))
            if task.family == TRAIN:
                self._train_walls.append(float(wall))
        done, total = self._counts()[task.family]
        label = f": {task.label}" if task.label else ""
        details_text = f" ({', '.join(details)})" if details else ""
        return f"{self._stamp()} {task.family} {done}/{total} done{label}{details_text}"

    def _unfinished(self, most: int = 4) -> str:
        """``not finished: Train ours seed 1 (was running), Report``: what a stopped run left undone (what it was
        building first: a killed worker's task among them), at most ``most`` named."""
        left = sorted((s for s in self._states.values() if not s.done), key=lambda s: (not s.touched, _family_key(s.task.family)))
        names = [" ".join(filter(None, [s.task.family, s.task.label, "(was running)" * s.touched])) for s in left[:most]]
        more = f", +{len(left) - most} more" if len(left) > most else ""
        return "not finished: " + ", ".join(names) + more if names else ""

    def _counts(self) -> dict[str, tuple[int, int]]:
        """Family -> (done, to run) in this run, in pipeline order (a family all reused: (0, 0))."""
        families = {task.family for task in self.tasks} | {s.task.family for s in self._states.values()}
        counts = {family: (0, 0) for family in sorted(families, key=_family_key)}
        for state in self._states.values():
            done, total = counts[state.task.family]
            counts[state.task.family] = (done + state.done, total + 1)
        return counts

    def _remaining(self) -> float | None:
        """Training time left: the trainings not done (a running one by its share of epochs left) times the
        mean wall time of this run's finished Trains, over the most trainings seen running side by side."""
        if not self._train_walls:
            return None
        left = 0.0
        for state in self._states.values():
            if state.task.family == TRAIN and not state.done:
                ran = state.epoch / state.task.max_epochs if state.epoch and state.task.max_epochs else 0.0
                left += 1.0 - min(1.0, ran)
        return left * sum(self._train_walls) / len(self._train_walls) / self._peak_parallel

    def _stamp(self) -> str:
        seconds = max(0, int(self._clock() - (self._started_at or 0.0)))
        return f"[{seconds // 60:3d}m{seconds % 60:02d}s]"

    def _write(self, lines: list[str]) -> None:
        if lines:
            self._stream.write("".join(line + "\n" for line in lines))
            self._stream.flush()

    def _status_lines(self, running: list[_State]) -> list[str]:
        """The stages ("data ✓ representations ✓ Train 12/35 Evaluate 3/20", done over to run), then each
        running training ("ours seed 1, epoch 7/20, val 5-way R@1 .52") or the other families running."""
        stages: dict[str, tuple[int, int]] = {}
        for family, (done, total) in self._counts().items():
            before = stages.get(STAGE_OF.get(family, family), (0, 0))
            stages[STAGE_OF.get(family, family)] = (before[0] + done, before[1] + total)
        lines = [" ".join(f"{name} ✓" if d == t else f"{name} {d}/{t}" for name, (d, t) in stages.items())]
        trainings = [state for state in running if state.task.family == TRAIN]
        for state in trainings[:MAX_RUNNING_LINES]:
            task, of = state.task, f"/{state.task.max_epochs}" if state.task.max_epochs else ""
            parts = [task.label or task.output_dir.name, f"epoch {state.epoch or 0}{of}"]
            if state.metric is not None:
                parts.append(f"{task.metric_label or task.metric} {_number(state.metric)}")
            lines.append(", ".join(parts))
        if len(trainings) > MAX_RUNNING_LINES:
            lines[-1] += f" (+{len(trainings) - MAX_RUNNING_LINES} more)"
        others = sorted({s.task.family for s in running if s.task.family != TRAIN}, key=_family_key)
        if others and len(lines) <= MAX_RUNNING_LINES:
            lines.append("running: " + ", ".join(others))
        return lines

    def _draw_live(self, running: list[_State], ending: str | None = None) -> list[str]:
        """Redraw the bar and the status lines in place (tqdm moves the cursor); return their texts."""
        from tqdm import tqdm  # only a terminal needs it

        width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)  # a full last column wraps
        done, total = self._counts().get(TRAIN, (0, 0))
        discovered = sum(state.discovered for state in self._states.values())
        desc = f"{TRAIN} {done}/{total}" + (f" (+{discovered} tuning)" if discovered else "")
        timing = f"{_duration(self._clock() - (self._started_at or 0.0))} elapsed"
        if total and ending is None:
            left = self._remaining()
            timing += ", estimating…" if left is None else f", ~{_duration(left)} left"
        status = self._status_lines(running)
        texts = [desc, *(status[:1] + [ending] if ending else status)]
        while len(self._bars) < len(texts):
            fmt = "{desc} |{bar}| {percentage:3.0f}%{postfix}" if not self._bars else "{desc}"
            at = len(self._bars)
            # tqdm hides a bar below the screen height it reads, -1 on a terminal that reports no size
            rows = max(8, shutil.get_terminal_size((80, 24)).lines)
            options = {"position": at, "desc": texts[at], "leave": True, "mininterval": 0, "ncols": width, "nrows": rows}
            self._bars.append(tqdm(total=1, file=self._stream, bar_format=fmt, **options))
        # tqdm draws no bar for a total of 0: no training to run shows as one step, done
        self._bars[0].total, self._bars[0].n = max(total, 1), done if total else 1
        self._bars[0].set_postfix_str(timing, refresh=False)
        for bar, text in zip(self._bars, texts + [""] * len(self._bars), strict=False):
            bar.ncols = width  # tqdm cuts a line to this width
            bar.set_description_str(text, refresh=False)
            bar.refresh()
        return [str(bar) for bar in self._bars if bar.desc]
