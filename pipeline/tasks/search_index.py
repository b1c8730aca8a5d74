"""The search index a FullRun leaves behind: one trained variant (the report's headline method, first seed)
exported as a model bundle, and its test split embedded through that bundle into an index that
``crossmodal serve`` answers from (the report ends with the command).

Why through the bundle and not from Evaluate's embeddings: the index then proves the bundle embeds images
from pixels (trunk included) and texts from words exactly as training did, which is what a user's new gallery
relies on. The test split is small, so this costs a second or two.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import luigi
import numpy as np
import pandas as pd

from pipeline.tasks.base import PipelineTask
from pipeline.tasks.evaluation import Evaluate
from pipeline.tasks.representations import TrainDoc2Vec
from pipeline.tasks.train_inputs import pair_inputs
from pipeline.tasks.training import Train, VariantParams
from pipeline.tasks.tuning import TunedRuns
from serving.bundle import BUNDLE_FORMAT_VERSION, export_bundle, load_bundle
from serving.embed import Embedder
from serving.gallery import validated_batch
from serving.index import INDEX_FORMAT_VERSION, GalleryIndex, embed_into
from serving.runs import bundle_parts
from task_engine.gpus import task_device
from task_engine.task import HashedTask


class SearchIndex(VariantParams, PipelineTask):
    """A bundle of one (variant, seed) and a search index of the test split made with it: the run at the
    profile's settings, or with ``tuned`` the run at the variant's tuned choice (a run of the tuned protocol
    alone trains no other)."""

    tuned = luigi.BoolParameter(default=False, parsing=luigi.BoolParameter.EXPLICIT_PARSING)
    tokenizes = True
    outputs = {"bundle": "bundle", "index": "index"}

    def model_tasks(self) -> dict[str, HashedTask]:
        """The Train and Evaluate of the indexed run (under ``tuned``, readable once TunedRuns has run)."""
        if not self.tuned:
            return {"train": self.clone(Train), "evaluate": self.clone(Evaluate)}
        evaluate = next(e for e in self.requires()["tuned"].evaluations() if e.seed == self.seed)
        return {"train": evaluate.clone(Train), "evaluate": evaluate}

    def requires(self) -> dict[str, HashedTask]:
        runs = {"tuned": self.clone(TunedRuns)} if self.tuned else {"train": self.clone(Train), "evaluate": self.clone(Evaluate)}
        return {
            **runs,
            **pair_inputs(self),
            # the bundle carries the run's Doc2Vec, for neighbor preservation on a table it is evaluated on
            "doc2vec": self.clone(TrainDoc2Vec),
        }

    def config(self) -> dict[str, Any]:
        return {
            "split": "test",
            "bundle_format": BUNDLE_FORMAT_VERSION,
            "index_format": INDEX_FORMAT_VERSION,
            "image_cache_size": self.settings.data.image_cache_size,
            **({"protocol": "tuned"} if self.tuned else {}),
        }

    def serve_command(self) -> str:
        return f"crossmodal serve {self.output_path('index').resolve()}"

    def produce(self, work_dir: Path) -> dict[str, Any]:
        inputs = self.requires()
        run = self.model_tasks()
        # the bundle as `crossmodal export` makes it: from the Train's and the Evaluate's folders
        bundle_dir = self.work_path(work_dir, "bundle")
        export_bundle(bundle_parts(run["train"].output_dir(), run["evaluate"].output_dir()), bundle_dir)
        bundle = load_bundle(bundle_dir)
        manifest = inputs["split"].manifest()
        test = manifest[manifest["split"] == "test"]
        items = pd.DataFrame(
            {
                "item_id": test["pair_id"].astype(str),
                "path": test["image_path"].astype(str),
                "text": test["text"].astype(object),
                "has_image": True,
            }
        )
        pixels = np.asarray(inputs["prepared"].images()[test["cache_row"].to_numpy()])
        index = GalleryIndex.create(self.work_path(work_dir, "index"), bundle)
        device = task_device()
        entry = embed_into(index, Embedder(bundle, device), validated_batch(items, pixels), "the test split")
        return {
            "variant": self.variant,
            "seed": self.seed,
            "items": entry["added"],
            "bundle_id": bundle.bundle_id,
            "search": {m: index.meta["search"][m]["backend"] for m in ("image", "text")},
            "device": str(device),
        }
