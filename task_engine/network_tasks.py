"""``[network_tasks]`` in luigi.cfg (or ``--network-tasks-...`` on the command line): where a task that runs a
network produces, and how many share one GPU. Luigi's settings: they decide how a run executes, never what it
computes, so no output's hash holds them."""

from __future__ import annotations

import luigi

MODES = ("auto", "spawn", "inline")


class network_tasks(luigi.Config):  # noqa: N801 - Luigi names a config section after its class
    process = luigi.ChoiceParameter(
        choices=MODES,
        default="auto",
        description="where a network task produces: auto (a child process on a GPU host's forked worker), spawn "
        "(always a child process), inline (its worker)",
    )
    slots_per_gpu = luigi.IntParameter(
        default=1,
        # the library's own default is the safe one; the pipeline's luigi_defaults.cfg sets 4 (why: that file)
        description="network tasks that run at once on one GPU (1 unless a luigi.cfg sets it; the pipeline's "
        "defaults set 4); [resources] gpu, when a luigi.cfg sets it, wins",
    )
