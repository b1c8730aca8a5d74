"""Luigi tasks: thin wrappers over pipeline.steps, models and evaluation.

Importing this package tells the engine (:mod:`task_engine.code_versions`) what a task family's fingerprint
covers: the project's packages (the engine's own among them: a change there is a change of what every task
runs), this package's modules as the task families, and where their versions are recorded
(``code_versions.json`` beside this file; ``python -m pipeline code-versions`` compares and records them).
"""

from pathlib import Path

from task_engine.code_versions import CodeBase, configure

#: the packages of this project: a module of one of them is part of a task's code, anything else a library
PROJECT_PACKAGES = ("common", "pipeline", "models", "data_recipes", "evaluation", "serving", "task_engine")

configure(
    CodeBase(
        root=Path(__file__).resolve().parents[2],
        packages=PROJECT_PACKAGES,
        tasks_package=__name__,
        versions_file=Path(__file__).with_name("code_versions.json"),
    )
)
