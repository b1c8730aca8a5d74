"""A model bundle: one folder holding everything needed to embed new images and texts with a trained model.

Layout (``BUNDLE_FORMAT_VERSION`` 4)::

    bundle.json   what the model is: its construction record (``model``: models.trained, the record Train
                  wrote, which builds the network), variant, training settings, test metrics, image
                  preprocessing (cache size, trunk input size, normalisation, backbone, trunk mode, pooled or
                  spatial features), text encoding (tokenizer, max tokens, vocabulary size, the Doc2Vec model's
                  files and inference epochs), embedding width, file checksums
    weights.pt    {"model": state dict, "trunk": state dict of the frozen trunk or None, "manifest": the manifest
                  as exported (JSON, without its file checksums), so an edited bundle.json is refused naming
                  the fields that changed}
    vocab.json    token -> row of the word embedding (rows 0 and 1: padding and unknown)
    doc2vec.model the run's Doc2Vec (gensim; large arrays beside it as doc2vec.model.*.npy): infers vectors
                  for the texts of a table ``crossmodal evaluate`` scores, for neighbor preservation

Version 3 (1.0, without the manifest's copy) is still read for one minor release; other versions (the
unreleased 1 and 2) are refused in one line: export again.

Why the frozen trunk's weights are copied in: with ``trunk: frozen`` the trained model holds no image trunk
(it trained on cached features), so a bundle without it could not embed a new photo; copying the weights
(not rebuilding from ImageNet) also keeps a randomly initialised trunk (offline, no weights) exact.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from common.bounded_json import RECORD, BoundedJsonError, loads_bounded, read_bounded
from common.files import atomic_directory, native_write, partial_path
from common.hashing import file_sha256
from common.tokenizer import TOKENIZERS
from models.backbones import Trunk, build_trunk, seeded_trunk
from models.record_check import ModelRecordError, changed_fields
from models.trained import ModelRecord, build_from_record, load_trained, load_weights, record_from

BUNDLE_FORMAT = "crossmodal-bundle"
BUNDLE_FORMAT_VERSION = 4
#: the versions this code reads
READABLE_VERSIONS = (3, 4)
#: what of the manifest its copy in weights.pt leaves out: the files' checksums and the id computed from them,
#: and the export's time (two exports of one model are one bundle, with one id)
UNCOPIED = ("files", "bundle_id", "created_at")
MANIFEST_FILE = "bundle.json"
DOC2VEC_FILE = "doc2vec.model"
WEIGHTS_FILE = "weights.pt"
VOCAB_FILE = "vocab.json"


class BundleError(ValueError):
    """A bundle that cannot be used (missing, corrupt, another format version, or not matching an index)."""


@dataclass(frozen=True)
class BundleParts:
    """What an export reads from a training run's folders (serving.runs.bundle_parts)."""

    variant: str
    label: str
    #: the resolved variant: ``model``, ``model_options``, ``losses``, ... (as Train hashed it)
    spec: dict[str, Any]
    #: the training settings Train hashed
    train: dict[str, Any]
    #: how the network is built (models.trained): the record Train wrote beside its checkpoints
    record: ModelRecord
    checkpoint: Path
    vocab: dict[str, int]
    #: side of the square thumbnails images were decoded to before the trunk's resize (the image cache)
    image_cache_size: int
    metrics: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    #: the run's gensim Doc2Vec model file (its companion ``<file>.*.npy`` files are copied too) and the
    #: epochs the pipeline infers new texts' vectors with; None: the bundle cannot give neighbor preservation
    doc2vec: Path | None = None
    doc2vec_infer_epochs: int | None = None
    #: the epoch its Train selected (``_meta.json``'s summary): the checkpoint's must be it (None: not known)
    trained_epoch: int | None = None


@dataclass
class Bundle:
    """A loaded bundle: the model (CPU, eval mode), the frozen trunk (None when the model holds its own),
    the vocabulary and the manifest."""

    path: Path
    manifest: dict[str, Any]
    model: nn.Module
    trunk: Trunk | None
    vocab: dict[str, int]

    @property
    def image(self) -> dict[str, Any]:
        return self.manifest["image"]

    @property
    def text(self) -> dict[str, Any]:
        return self.manifest["text"]

    @property
    def width(self) -> int:
        return int(self.manifest["embedding"]["width"])

    @property
    def bundle_id(self) -> str:
        return self.manifest["bundle_id"]

    @property
    def tokenizer_version(self) -> int:
        """The tokenizer the model was trained with (``common.tokenizer.TOKENIZERS``)."""
        return int(self.text["tokenizer_version"])

    def doc2vec(self):  # noqa: ANN201 - gensim's Doc2Vec, imported only when asked for
        """The run's Doc2Vec model, or None when the bundle holds none (exported from a Train without an Evaluate)."""
        described = self.text.get("doc2vec")
        if not described:
            return None
        from gensim.models.doc2vec import Doc2Vec

        return Doc2Vec.load(str(self.path / described["file"]))

    def identity(self) -> dict[str, Any]:
        """What an index built with this bundle records and checks: vectors of another bundle are not
        comparable with this model's queries."""
        return {
            "bundle_id": self.bundle_id,
            "label": self.manifest["variant"]["label"],
            "width": self.width,
            "per_item": int(self.manifest["embedding"]["per_item"]),
            "backbone": self.image["backbone"],
            "trunk": self.image["trunk"],
        }


def _word_embedding_shape(state: dict[str, torch.Tensor]) -> tuple[int, int]:
    names = [name for name in state if name.startswith("text_encoder.") and name.endswith("embedding.weight")]
    if len(names) != 1:
        raise BundleError(f"cannot find the text encoder's word embedding among {sorted(state)[:8]}...")
    rows, width = state[names[0]].shape
    return int(rows), int(width)


def _embedding_per_item(model: nn.Module) -> int:
    """K embeddings per item (PVSE: num_embeds; VSE: 1), probed on one padded text."""
    with torch.no_grad():
        out = model.encode_text(torch.ones(1, 1, dtype=torch.int64), torch.ones(1, dtype=torch.int64))
    return 1 if out.dim() == 2 else int(out.shape[1])


def export_bundle(parts: BundleParts, out: Path) -> dict[str, Any]:
    """Write ``parts`` as a bundle folder ``out`` (which must not exist or be empty); returns its manifest.

    The folder is built as ``<out>.partial`` and renamed into place, so a killed export leaves no bundle
    that looks complete."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is {'not empty' if out.is_dir() else 'a file'}; export into a new folder")
    record = parts.record
    try:
        model, epoch = load_trained(record, parts.checkpoint)  # the one loader: record checked, weights fitted
    except ModelRecordError as error:
        raise BundleError(str(error)) from None
    if parts.trained_epoch is not None and epoch != parts.trained_epoch:
        raise BundleError(
            f"{parts.checkpoint} holds the weights of epoch {epoch}, but its Train selected epoch {parts.trained_epoch}: "
            "it is not the checkpoint this Train kept; export an intact copy of the Train folder, or train again"
        )
    state = model.state_dict()
    vocab_size, word_dim = _word_embedding_shape(state)
    if vocab_size != len(parts.vocab) + 2 or vocab_size != record.encoder.vocab_size:
        raise BundleError(
            f"the checkpoint's word embedding has {vocab_size} rows, its model record {record.encoder.vocab_size} and "
            f"the vocabulary {len(parts.vocab)} words (+2 for padding and unknown): they come from different runs"
        )
    trunk_state, feature_dim, pretrained_loaded = None, record.encoder.feature_dim, None
    if record.frozen_trunk is not None:
        trunk = cached_trunk(record)
        trunk_state, feature_dim, pretrained_loaded = trunk.state_dict(), trunk.feature_dim, trunk.pretrained_loaded
    manifest: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_FORMAT_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "torch": torch.__version__,
        "model": record.to_json(),
        "variant": {"name": parts.variant, "label": parts.label, "spec": parts.spec},
        "train": dict(parts.train),
        "metrics": parts.metrics,
        "checkpoint_epoch": epoch,
        "source": parts.source,
        "embedding": {"width": record.encoder.embed_dim, "per_item": 1},
        "image": {
            "backbone": record.encoder.backbone,
            "trunk": record.encoder.trunk,
            "features": record.features,
            "feature_dim": feature_dim,
            "cache_size": parts.image_cache_size,
            "image_size": record.image_size,
            "mean": list(record.mean),
            "std": list(record.std),
            "imagenet_weights_loaded": pretrained_loaded,
        },
        "text": {
            "tokenizer_version": record.tokenizer_version,
            "unicode_version": unicodedata.unidata_version,
            "max_tokens": record.max_text_tokens,
            "vocab_size": vocab_size,
            "word_dim": word_dim,
            "doc2vec": (
                {"file": DOC2VEC_FILE, "infer_epochs": int(parts.doc2vec_infer_epochs)} if parts.doc2vec else None
            ),
        },
    }
    manifest["embedding"]["per_item"] = _embedding_per_item(model)

    try:
        _write_bundle(out, manifest, parts, state, trunk_state)
    except BaseException:
        # an export cannot resume: a half-written bundle folder is removed (and its space given back)
        shutil.rmtree(partial_path(out), ignore_errors=True)
        raise
    return manifest


def _write_bundle(
    out: Path, manifest: dict[str, Any], parts: BundleParts, state: dict[str, Any], trunk_state: dict[str, Any] | None
) -> None:
    with atomic_directory(out) as partial:
        # the manifest as exported travels with the weights: an edit of bundle.json is found and named
        exported = json.dumps({k: v for k, v in manifest.items() if k not in UNCOPIED}, sort_keys=True)
        with native_write(partial / WEIGHTS_FILE):
            torch.save({"model": state, "trunk": trunk_state, "manifest": exported}, partial / WEIGHTS_FILE)
        (partial / VOCAB_FILE).write_text(json.dumps(parts.vocab, sort_keys=True))
        names = [WEIGHTS_FILE, VOCAB_FILE]
        if parts.doc2vec is not None:  # gensim writes its large arrays beside the model as <file>.*.npy
            for source in sorted(Path(parts.doc2vec).parent.glob(Path(parts.doc2vec).name + "*")):
                name = DOC2VEC_FILE + source.name[len(Path(parts.doc2vec).name) :]
                shutil.copyfile(source, partial / name)
                names.append(name)
        manifest["files"] = {name: file_sha256(partial / name) for name in names}
        manifest["bundle_id"] = hashlib.sha256(
            json.dumps(manifest["files"], sort_keys=True).encode()
        ).hexdigest()[:16]
        (partial / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def cached_trunk(record: ModelRecord) -> Trunk:
    """The trunk whose features a cached-trunk model trained on, rebuilt as ``TrunkFeatures`` built it (the
    record's seed and ImageNet weights), refused when this machine would build another: other weights, or
    none where there were some."""
    frozen = record.frozen_trunk
    trunk = seeded_trunk(record.encoder.backbone, frozen["pretrained"], frozen["seed"])
    if trunk.pretrained_loaded != frozen["weights_loaded"]:
        had = "ImageNet weights" if frozen["weights_loaded"] else "a random init (no ImageNet weights)"
        raise BundleError(
            f"the model trained on features of a {record.encoder.backbone} trunk with {had}, which this machine "
            "rebuilds otherwise; export where that trunk's ImageNet weights are "
            + ("installed" if frozen["weights_loaded"] else "absent, or retrain")
        )
    used = (frozen.get("weights") or {}).get("sha256")
    found = (trunk.weights_source or {}).get("sha256")
    if used is not None and found != used:
        raise BundleError(
            f"the model trained on features of {frozen['weights'].get('file')} (SHA-256 {used[:12]}…), but this "
            f"machine's {record.encoder.backbone} weights are "
            + (f"another file (SHA-256 {found[:12]}…)" if found else "not a file it can read")
            + ": export where the same weights are installed"
        )
    return trunk


def read_manifest(path: Path) -> dict[str, Any]:
    """The bundle's manifest, checked for format and version (nothing heavy is loaded)."""
    path = Path(path)
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.is_file():
        raise BundleError(
            f"{path} is not a model bundle (no {MANIFEST_FILE}); make one with `crossmodal export RUN OUT`"
        )
    manifest = _bundled_json(manifest_path)
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{manifest_path} is not a {BUNDLE_FORMAT} manifest")
    version = manifest.get("format_version")
    if version not in READABLE_VERSIONS:
        raise BundleError(
            f"{path} is bundle format version {version}; this version of crossmodal reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}. Export the model again with this version (`crossmodal export`)"
        )
    return manifest


def _bundled_json(source: Path | str, what: str = "") -> Any:
    """A JSON file of the bundle (``source`` a path), or JSON text it holds (``what`` names it), within bounds."""
    try:
        if isinstance(source, Path):
            return read_bounded(source, RECORD)
        return loads_bounded(source, what, RECORD)
    except BoundedJsonError as error:
        raise BundleError(f"{what or source} is corrupt: it {error.detail}; export the bundle again") from None


def load_bundle(path: Path) -> Bundle:
    """Load a bundle onto the CPU in eval mode; a missing, corrupt or other-version bundle raises
    :class:`BundleError` naming the problem."""
    path = Path(path)
    manifest = read_manifest(path)
    for name, expected in manifest["files"].items():
        file = path / name
        if not file.is_file():
            raise BundleError(f"{path} lacks {name}; the bundle is incomplete, export it again")
        if file_sha256(file) != expected:
            raise BundleError(
                f"{file} is corrupt (its checksum differs from the one recorded at export); export it again"
            )
    version = str(manifest["text"]["tokenizer_version"])
    if version not in TOKENIZERS:
        raise BundleError(
            f"{path} was trained with tokenizer version {version}; this version of crossmodal has tokenizers "
            f"{', '.join(TOKENIZERS)}: update crossmodal, or export the model again"
        )
    weights = torch.load(path / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    vocab = _bundled_json(path / VOCAB_FILE)
    where = str(path / MANIFEST_FILE)
    if "manifest" in weights:  # format 4: the manifest as exported
        exported = _bundled_json(weights["manifest"], f"{path / WEIGHTS_FILE} (its manifest)")
        edited = changed_fields({k: v for k, v in manifest.items() if k not in UNCOPIED}, exported)
        if edited:
            shown = ", ".join(edited[:5]) + (f" and {len(edited) - 5} more" if len(edited) > 5 else "")
            raise BundleError(f"{where}: {shown} changed since the bundle was exported; export it again")
    try:
        record = record_from(manifest.get("model"), None, f"{where} (model)")
        model = build_from_record(record)
        load_weights(model, weights["model"], str(path / WEIGHTS_FILE))
    except ModelRecordError as error:
        raise BundleError(str(error)) from None
    trunk = None
    if record.frozen_trunk is not None:
        # the record's backbone (the manifest's image section repeats it for readers of the file)
        trunk = build_trunk(record.encoder.backbone, False)
        try:
            load_weights(trunk, weights["trunk"] or {}, f"{path / WEIGHTS_FILE} (trunk)")
        except ModelRecordError as error:
            raise BundleError(str(error)) from None
        trunk.eval()
    return Bundle(path=path, manifest=manifest, model=model.eval(), trunk=trunk, vocab=vocab)
