"""What every task of the pipeline carries: the id of its run plan, and what identifies it within the run.

A task started from the command line (``luigi --module pipeline FullRun ...``, or any task alone) has no plan
yet: it resolves one from its flags (:func:`pipeline.config.plan.resolve_plan`) and checks it when it is built,
writes it into the run root when Luigi schedules it (the first question Luigi asks a run is whether its task is
complete: :meth:`PlanParams.complete`), and hands its id to every task it requires (:meth:`PlanParams.clone`).
Every task reads its settings from that plan's file (``self.run_plan``: :func:`pipeline.config.plan_file.read_plan`),
never from the flags: the flags are only the command line's spelling of changes (:mod:`pipeline.config.flags`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import luigi
from luigi.freezing import recursively_unfreeze

from common.bounded_json import COMMAND_LINE, BoundedJsonError, NotJsonError, loads_bounded
from common.run_folder import RunFolderError, check_plan_id
from common.tokenizer import TOKENIZER_VERSION
from models.settings import TrainSettings
from pipeline.config.checks import RunConfigurationError, exit_or_raise
from pipeline.config.flags import flag_changes
from pipeline.config.plan import RunPlan, resolve_plan
from pipeline.config.plan_file import hold_plan, read_plan, write_plan
from pipeline.config.profiles import DEFAULT_PROFILE
from pipeline.config.run_settings import RunSettings
from pipeline.config.variant_spec import Variant
from pipeline.engine.task import HashedTask

logger = logging.getLogger("luigi-interface")


class SettingChangesParameter(luigi.Parameter):
    """``--set path=value``, repeatable on the command line (``pipeline.config.changes`` says what a path
    reaches): a tuple of ``path=value`` strings, in the order given (a later change of one path wins)."""

    @classmethod
    def _parser_kwargs(cls, param_name: str, task_name: str | None = None) -> dict[str, Any]:
        return {**super()._parser_kwargs(param_name, task_name), "action": "append"}

    def parse(self, x: Any) -> Any:
        if isinstance(x, UnreadFlag):
            return x
        if isinstance(x, str):  # luigi.cfg: one change, or a JSON list of them
            try:
                x = loads_bounded(x, "the value", COMMAND_LINE) if x.strip().startswith("[") else [x]
            except BoundedJsonError as error:  # refused in one line when the task is made (check_flags)
                unread = UnreadFlag(x)
                unread.accepts, unread.problem = "a JSON list of path=value changes", str(error)
                return unread
        return tuple(str(change) for change in x)

    def normalize(self, x: Any) -> tuple[str, ...]:
        return self.parse(x)

    def serialize(self, x: Any) -> str:
        return json.dumps(list(x))


#: the command line's flags: read only by a task that starts a run, never passed to the tasks it requires
FLAGS = (
    "profile",
    "set",
    "dataset",
    "raw_dir",
    "shards",
    "dataset_options",
    "data_seed",
    "reject_budget",
    "seeds",
    "protocol",
    "variants",
    "variant_overrides",
)


class UnreadFlag(str):
    """The text of a flag its parameter could not read (not JSON, not a number, or JSON beyond the bounds of a
    command-line value): kept until the plan is made, which refuses it in one line (Luigi itself would print a
    traceback and exit 4)."""

    accepts = ""
    #: what is wrong with it when that is more than not being what the flag accepts (too deep, too long)
    problem = ""

    def refusal(self, flag: str) -> str:
        if self.problem:
            return f"{flag}: {self.problem}"
        return f"{flag} {str(self)[:200]!r}: expected {self.accepts}"


def lenient(parameter: type[luigi.Parameter], accepts: str, json_text: bool = False) -> type[luigi.Parameter]:
    """``parameter`` whose ``parse`` keeps what it cannot read as an :class:`UnreadFlag` saying what it accepts;
    ``json_text``: Luigi parses its text as JSON, checked first by the project's bounded reader."""

    class Lenient(parameter):  # type: ignore[misc, valid-type]
        def parse(self, x: Any) -> Any:
            try:
                if json_text and isinstance(x, str):
                    # within the bounds of a command-line value before Luigi's own json.loads sees it
                    loads_bounded(x, "the value", COMMAND_LINE)
                return super().parse(x)
            except (ValueError, TypeError) as error:
                unread = UnreadFlag(x)
                unread.accepts = accepts
                if isinstance(error, BoundedJsonError) and not isinstance(error, NotJsonError):
                    unread.problem = str(error)
                return unread

        def normalize(self, x: Any) -> Any:
            return x if isinstance(x, UnreadFlag) else super().normalize(x)

        def _warn_on_wrong_param_type(self, param_name: str, param_value: Any) -> None:
            if not isinstance(param_value, UnreadFlag):  # refused in one line instead
                super()._warn_on_wrong_param_type(param_name, param_value)

    Lenient.__name__ = f"Lenient{parameter.__name__}"
    return Lenient


JsonObjectParameter = lenient(luigi.DictParameter, "a JSON object", json_text=True)
SeedParameter = lenient(luigi.OptionalIntParameter, "an integer")
ShareParameter = lenient(luigi.OptionalFloatParameter, "a number")
JsonListParameter = lenient(luigi.ListParameter, "a JSON list", json_text=True)
IdentityIntParameter = lenient(luigi.IntParameter, "an integer")


def _default_of(parameter: luigi.Parameter) -> Any:
    """A parameter's default as its values compare (a list default is kept as a tuple)."""
    default = parameter._default
    return default if default is None or default is luigi.parameter._no_value else parameter.normalize(default)


def typed_flags(task: Any, names: tuple[str, ...] = FLAGS) -> set[str]:
    """The flags of ``names`` typed on the command line for ``task`` when it is of the family the command starts
    (``--profile`` or ``--FullRun-profile``), whatever their value. Not the parameters a task was built with: Luigi
    rebuilds a task a worker yields with every parameter, flags at their defaults included."""
    from luigi.cmdline_parser import CmdlineParser

    parser = CmdlineParser.get_instance()
    family = task.get_task_family()
    if parser is None or getattr(parser.known_args, "root_task", None) != family:
        return set()
    typed = vars(parser.known_args)
    return {name for name in names if typed.get(name) is not None or typed.get(f"{family}_{name}") is not None}


def check_flags(task: Any) -> None:
    """One line for the first parameter that could not be read, and for flags beside a given plan (they would be
    ignored: the plan holds the settings): one typed on the command line whatever its value (``--profile demo``
    too, the default), one set elsewhere (luigi.cfg, code) when it differs from its default."""
    typed = typed_flags(task)
    for name, _ in task.get_params():
        value = getattr(task, name, None)
        if isinstance(value, UnreadFlag):
            raise RunConfigurationError(value.refusal(f"--{name.replace('_', '-')}"))
    if task.plan or typed_flags(task, ("plan",)):  # given, even empty (``--plan ''`` would start a new run)
        try:
            check_plan_id(task.plan)
        except RunFolderError as error:
            raise RunConfigurationError(str(error)) from None
        given = [
            name
            for name, parameter in task.get_params()
            if name in FLAGS and (name in typed or getattr(task, name) != _default_of(parameter))
        ]
        if given:
            raise RunConfigurationError(
                f"--plan {task.plan} holds the run's settings: drop --{', --'.join(n.replace('_', '-') for n in given)}, "
                "or start without --plan"
            )


class PlanParams:
    """The plan's id, and the flags a run started from this task resolves its plan from."""

    plan = luigi.Parameter(
        default="", description="the run plan's id (<run_root>/RunPlan/<id>/run_plan.json): given by the task a run starts from"
    )
    profile = luigi.Parameter(
        default=DEFAULT_PROFILE, description="a profile of pipeline/config/profiles.py: smoke, demo, demo-finetune, paper"
    )
    set = SettingChangesParameter(
        default=(),
        description="change a setting: --set path=value (repeatable), e.g. --set neighbors.k=50 "
        "--set variants.*.train.learning_rate=3e-4 (docs/usage.md lists the paths)",
    )
    dataset = luigi.OptionalParameter(default=None, description="recipe name (data_recipes/): --set data.recipe=...")
    raw_dir = luigi.Parameter(default="", description="folder with the raw dataset files: --set data.raw_dir=...")
    shards = JsonListParameter(
        default=[],
        description="raw folders added later (a new dump, a new month), in arrival order: each is read, "
        "validated and cached once and deduplicated against everything before it (--set data.shards=[...])",
    )
    dataset_options = JsonObjectParameter(default={}, description='recipe options, e.g. {"n_pairs": 2000}: --set data.options.<name>=...')
    data_seed = SeedParameter(default=None, description="seed of data generation, Doc2Vec, Annoy, features: --set data.seed=...")
    reject_budget = ShareParameter(
        default=None, description="largest share of input pairs that may be rejected: --set data.reject_budget=..."
    )
    seeds = JsonListParameter(default=[], description="training seeds of every variant: --set seeds=[...]")
    protocol = luigi.Parameter(default="", description="shared | tuned | both: --set tuning.protocol=...")
    variants = JsonListParameter(
        default=[], description="variants to compare (default: the paper's grid for the dataset, pipeline/config/variants.py)"
    )
    variant_overrides = JsonObjectParameter(
        default={}, description='per-variant changes: {"ours": {"within_modality": {"text_weight": 0.5}}}: --set variants.<name>...'
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            check_flags(self)
            if not self.plan:
                # started from the command line (or from code): resolve and check the plan before any work, and
                # this task's own parameters against it; a wrong value is one line and exit 2 on the command line
                self._own_plan = self.resolve_from_flags()
                hold_plan(self._own_plan, self.run_root)
                self.check_identity()
            else:
                self.run_plan  # noqa: B018 - a plan this process cannot read is refused now, in one line
        except RunConfigurationError as error:
            exit_or_raise(error)

    def started_plans(self) -> list[RunPlan]:
        """The plans a run started from this task resolved (its own; a sweep's values too)."""
        return [self._own_plan]

    def complete(self) -> bool:
        """Whether the task is done; for the task a run starts from, Luigi's first question when it schedules the
        run (``python -m pipeline plan`` never asks it), so its plans' files are written here first, before any
        task reads them (a missing, damaged or edited one anew: the one writer, :func:`write_plan`)."""
        if not self.plan:
            for plan in self.started_plans():
                try:
                    write_plan(self.run_root, plan)
                except OSError as error:  # a full disk: the first task that writes says so, in one line
                    logger.warning("the run plan %s could not be written: %s", plan.id, error)
        return super().complete()

    def check_identity(self) -> None:
        """What identifies this task, checked against its plan when a run starts from it (nothing by default)."""

    def resolve_from_flags(self) -> RunPlan:
        grid = [str(v) for v in self.variants]
        extra = [self.variant] if isinstance(getattr(self, "variant", None), str) else []
        return resolve_plan(self.profile, self.flag_changes(), grid or self.default_grid(), extra)

    def flag_changes(self) -> list[str]:
        """``--set`` changes, then the other flags' (a flag wins over a ``--set`` of the same setting)."""
        seeds = list(self.seeds)
        if not all(isinstance(seed, int) and not isinstance(seed, bool) for seed in seeds):
            raise RunConfigurationError(f"--seeds {seeds}: give integers, e.g. --seeds '[0,1,2]'")
        return [
            *self.set,
            *flag_changes(
                dataset=self.dataset,
                raw_dir=self.raw_dir,
                shards=list(self.shards),
                dataset_options=recursively_unfreeze(self.dataset_options),
                data_seed=self.data_seed,
                reject_budget=self.reject_budget,
                seeds=seeds,
                protocol=self.protocol,
                variant_overrides=recursively_unfreeze(self.variant_overrides),
            ),
        ]

    def default_grid(self) -> list[str]:
        """The variants a run started from this task compares when ``--variants`` names none: its own variant
        for a task of one variant, else the paper's grid (empty)."""
        variant = getattr(self, "variant", None)
        return [variant] if isinstance(variant, str) else []

    @property
    def plan_id(self) -> str:
        return self.plan or self._own_plan.id

    @property
    def run_plan(self) -> RunPlan:
        """The run's plan, read from its file in the run root and checked against its id (the one reader,
        :func:`read_plan`), in whatever process the task runs."""
        return read_plan(self.run_root, self.plan_id)

    @property
    def settings(self) -> RunSettings:
        """The run's settings: the defaults with the profile's and the run's changes."""
        return self.run_plan.settings

    def process_params(self) -> dict[str, str]:
        """What another process rebuilds this task from: the plan's id (it reads the plan's file) and what
        identifies the task, never the flags, which would resolve the plan again there."""
        params = {name: value for name, value in self.to_str_params().items() if name not in FLAGS}
        return {**params, "plan": self.plan_id}

    def clone(self, cls: type | None = None, **kwargs: Any) -> Any:
        """A task of this run: the plan's id and the parameters that identify it, never the flags."""
        cls = cls or self.__class__
        flags = sorted(set(kwargs) & set(FLAGS))
        if flags:
            raise TypeError(
                f"clone() of a task of a run takes no flags ({', '.join(flags)}): a setting changes with a new plan, "
                "made by a task started with those flags"
            )
        given = {"plan": self.plan_id, **kwargs}
        for name, _ in cls.get_params():
            if name not in given and name not in FLAGS and hasattr(self, name):
                given[name] = getattr(self, name)
        return cls(**given)


class PipelineTask(PlanParams, HashedTask):
    """A hashed task of this pipeline: it reads the run plan; ``tokenizes``: it reads texts through
    ``common.tokenizer``, whose version is then part of its output hash (a run root never reuses an output made
    with other tokens)."""

    tokenizes = False

    def identity_extras(self) -> dict[str, Any]:
        return {"tokenizer": TOKENIZER_VERSION} if self.tokenizes else {}


class VariantChoice:
    """A method variant of the run plan, with a task's own ``point`` on top (a tuning trial's settings)."""

    variant = luigi.Parameter(default="ours", description="method variant (pipeline/config/variants.py)")
    point = JsonObjectParameter(
        default={}, description='a tuning trial\'s changes to the variant, e.g. {"train": {"learning_rate": 0.001}}'
    )

    def check_identity(self) -> None:
        """The variant with this point builds: its changes exist, its losses take their values, and its training
        settings pass the plan's checks."""
        from pipeline.config.changes import check_train_change
        from pipeline.config.plan import check_training
        from pipeline.config.variant_spec import VariantError

        point = recursively_unfreeze(self.point)
        for name, value in dict(point.get("train", {})).items():
            check_train_change(self.settings.train, name, value, f"--point train.{name}")
        try:
            spec = self.variant_spec()
            spec.build_losses()
        except (VariantError, ValueError, TypeError) as error:
            raise RunConfigurationError(f"--point {dict(recursively_unfreeze(self.point))}: {error}") from None
        check_training(self.variant, self.train_settings())

    def variant_spec(self) -> Variant:
        return self.run_plan.variant(self.variant, recursively_unfreeze(self.point))

    def train_settings(self) -> TrainSettings:
        """The run's training settings with this variant's (and this point's) changes applied."""
        return self.run_plan.train_settings(self.variant, recursively_unfreeze(self.point))
