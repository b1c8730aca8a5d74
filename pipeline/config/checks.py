"""The checks a resolved run plan runs (:func:`pipeline.config.plan.check_plan` calls them once, when the plan is
made), so a wrong value stops the command at once with one line naming it and what is valid, before any work."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.config.run_settings import RunSettings
    from pipeline.config.variant_spec import Variant


class RunConfigurationError(ValueError):
    """A run's parameters name something that does not exist; the message says what would."""


def check_recipe_options(dataset: str, options: Mapping[str, Any]) -> None:
    """Raise :class:`RunConfigurationError` for a recipe option (``--set data.options.<name>``,
    ``--dataset-options``) that the dataset's recipe does not take."""
    import inspect

    from data_recipes import RECIPE_BUILDERS

    parameters = inspect.signature(RECIPE_BUILDERS.get(dataset)).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    valid = [name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise RunConfigurationError(
            f"recipe {dataset!r} has no option(s) {unknown}; valid: {', '.join(valid) or 'none'}"
        )


def check_tuning(settings: RunSettings, tuned_variants: Iterable[str], variants: Mapping[str, Variant]) -> None:
    """Raise :class:`RunConfigurationError` for a tuning budget that some tuned variant's search space cannot
    fill (every variant of a comparison gets exactly the budget's trials), or an extended cap not above the cap."""
    tuning = settings.tuning
    tuned_variants = list(tuned_variants)
    cap = settings.train.epochs
    if tuned_variants and tuning.extended_cap(cap) <= cap:
        raise RunConfigurationError(
            f"the tuning's extended_epochs ({tuning.extended_cap(cap)}) must be above the epoch cap ({cap}): a "
            "capped run is continued to it"
        )
    budget = tuning.budget
    short = {name: len(variants[name].search_space.points()) for name in tuned_variants}
    short = {name: points for name, points in short.items() if points < budget}
    if short:
        raise RunConfigurationError(
            f"the tuning budget is {budget} trials per variant but the search space of "
            + ", ".join(f"{name!r} has {points} point(s)" for name, points in short.items())
            + ": every variant of a comparison gets the same number of trials; lower the profile's budget"
        )


def gpu_shortfall(processes_by_variant: Mapping[str, int], host_gpus: int, scheduler_gpus: int) -> str | None:
    """Why the variants' ``nproc_per_node`` cannot run on this host (None when they can): more processes than
    GPUs, or more than Luigi's ``[resources] gpu`` hands out (Luigi would then never schedule that Train and
    the run would end with nothing said but 'not run')."""
    wanted = {name: n for name, n in processes_by_variant.items() if n > 1}
    if not wanted:
        return None
    name, most = max(wanted.items(), key=lambda item: item[1])
    if most > host_gpus:
        return f"variant {name!r} asks for nproc_per_node={most} GPUs, this host has {host_gpus}"
    if most > scheduler_gpus:
        return (
            f"variant {name!r} asks for nproc_per_node={most} GPUs but luigi.cfg hands out "
            f"[resources] gpu = {scheduler_gpus}; set it to this host's GPU count ({host_gpus})"
        )
    return None


def check_gpu_fit(processes_by_variant: Mapping[str, int]) -> None:
    """On a CUDA host, raise :class:`RunConfigurationError` when a variant's ``nproc_per_node`` (given per
    variant) does not fit (see :func:`gpu_shortfall`). On CPU the processes are gloo processes and always fit."""
    from pipeline.engine.gpus import host_gpu_count, scheduler_gpu_slots

    gpus = host_gpu_count()
    if not gpus:
        return
    problem = gpu_shortfall(processes_by_variant, gpus, scheduler_gpu_slots())
    if problem:
        raise RunConfigurationError(problem)


def check_backbone(name: str, where: str) -> None:
    """:class:`RunConfigurationError` naming ``where`` (the setting or flag) for an image trunk that does not
    exist (``models.backbones``: a named trunk or ``timm:<arch>``)."""
    from models.backbones import backbone_spec

    try:
        backbone_spec(name)
    except KeyError as error:
        raise RunConfigurationError(f"{where}: {error}") from None


def check_trunk_stages(backbone: str, trained_stages: int, where: str) -> None:
    """:class:`RunConfigurationError` naming ``where`` when ``backbone`` cannot train its top ``trained_stages``
    stages (it is not cut into stages here, or has fewer): ``models.backbones.stages_refusal``, the one check of a
    stage count, on the count its spec declares (no trunk is built for a named backbone)."""
    from models.backbones import stage_count, stages_refusal

    try:
        refusal = stages_refusal(backbone, stage_count(backbone), trained_stages)
    except KeyError as error:
        raise RunConfigurationError(f"{where}: {error}") from None
    if refusal:
        raise RunConfigurationError(f"{where}: {refusal}")


def check_trunk(train: Any, where: str = "") -> None:
    """The trunk mode of training settings ``train`` fits its backbone (``top<k>``: it has k stages); an error names
    ``where`` (a variant) and ``train.trunk``. The settings listing and the plan both check it (:func:`pipeline.
    config.changes.apply_changes`, :func:`pipeline.config.plan.check_training`)."""
    if train.trunk_mode.trained_stages:
        check_trunk_stages(train.backbone, train.trunk_mode.trained_stages, f"{where}train.trunk={train.trunk}")


def exit_or_raise(error: RunConfigurationError) -> None:
    """On the ``luigi`` command line: print ``error: ...`` as one line and exit with status 2 (luigi would
    log a traceback and, for an error met while scheduling, exit 0). Called from code (``luigi.build``): raise."""
    from luigi.cmdline_parser import CmdlineParser

    if CmdlineParser.get_instance() is not None:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)
    raise error
