"""Luigi tasks: thin wrappers over pipeline.steps, models and evaluation.

Importing this package tells the engine (:mod:`pipeline.engine.code_versions`) what a task family's
fingerprint covers: the project's packages, and this package's modules as the task families.
"""

from pathlib import Path

from pipeline.engine.code_versions import CodeBase, configure

#: the packages of this project: a module of one of them is part of a task's code, anything else a library
PROJECT_PACKAGES = ("common", "pipeline", "models", "data_recipes", "evaluation", "serving")

configure(CodeBase(root=Path(__file__).resolve().parents[2], packages=PROJECT_PACKAGES, tasks_package=__name__))
