"""Luigi pipeline: ``luigi --module pipeline FullRun`` (see README)."""

from pipeline.tasks.cocos import Cocos
from pipeline.tasks.data import Deduplicate, PrepareDataset, PrepareShard, Split
from pipeline.tasks.evaluation import Evaluate
from pipeline.tasks.report import FullRun, Report
from pipeline.tasks.representations import ImageFeatures, NeighborTables, TrainDoc2Vec, TrainWordVectors
from pipeline.tasks.training import Train

__all__ = [
    "Cocos",
    "Deduplicate",
    "Evaluate",
    "FullRun",
    "ImageFeatures",
    "NeighborTables",
    "PrepareDataset",
    "PrepareShard",
    "Report",
    "Split",
    "Train",
    "TrainDoc2Vec",
    "TrainWordVectors",
]
