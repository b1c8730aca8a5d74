"""Luigi pipeline: ``luigi --module pipeline FullRun`` (see README).

Importing it first keeps a working folder that ``python -m`` put first on ``sys.path`` behind the installed
packages (:mod:`pipeline.run.import_path`), then applies the package's Luigi defaults beneath the user's files
(:mod:`pipeline.run.luigi_defaults`), before Luigi reads ``[core]`` or ``[retcode]``.
"""

import pipeline.run.import_path  # noqa: F401 - first: before anything imports common, models, evaluation, ...

# isort: split
from pipeline.run.failures import install_one_line_input_errors
from pipeline.run.full_run import FullRun
from pipeline.run.luigi_defaults import apply_package_defaults
from pipeline.tasks.cocos import Cocos
from pipeline.tasks.data import Deduplicate, PrepareDataset, PrepareShard, Split
from pipeline.tasks.evaluation import Evaluate
from pipeline.tasks.report import Report
from pipeline.tasks.representations import NeighborTables, TrainDoc2Vec, TrainWordVectors, TrunkFeatures
from pipeline.tasks.search_index import SearchIndex
from pipeline.tasks.tradeoff import WithinModalityTradeoff
from pipeline.tasks.training import Train
from pipeline.tasks.tuning import Tune, TunedRuns

apply_package_defaults()
install_one_line_input_errors()

__all__ = [
    "Cocos",
    "Deduplicate",
    "Evaluate",
    "FullRun",
    "NeighborTables",
    "PrepareDataset",
    "PrepareShard",
    "Report",
    "SearchIndex",
    "Split",
    "Train",
    "TrainDoc2Vec",
    "TrainWordVectors",
    "TrunkFeatures",
    "Tune",
    "TunedRuns",
    "WithinModalityTradeoff",
]
