"""CLIP-family models as baselines of ``crossmodal evaluate``: an ``open_clip`` model (``pip install -e
'.[clip]'``) embeds a table's validated rows through its *own* transforms and tokenizer, so it is scored by
the same metric functions as our bundles.

A model is named ``MODEL:PRETRAINED`` — an ``open_clip`` architecture and either one of its pretrained tags
(``ViT-B-32:laion2b_s34b_b79k``) or a local weights file (``ViT-B-32:/path/to/weights.pt``). Weights come
from the local cache (Hugging Face's, or ``~/.cache/clip`` for OpenAI's) or, when the hub can be reached
and ``HF_HUB_OFFLINE`` is not set, are downloaded first. A baseline never runs on random weights: what cannot
be found is one line naming the model, the tag and how to fetch it or point at a file, before any work.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import torch
import torch.nn.functional as F

from data_recipes.validate import load_image_rgb

BATCH_SIZE = 64
#: where the weights of a pretrained tag come from, for the reachability probe
HUB_HOST = "huggingface.co"


class OpenClipError(ValueError):
    """A CLIP-family baseline that cannot be used as asked; the message names it and the fix."""


@dataclass(frozen=True)
class OpenClipSpec:
    """``MODEL:PRETRAINED`` as given on the command line."""

    model: str
    pretrained: str

    @classmethod
    def parse(cls, text: str) -> OpenClipSpec:
        model, sep, pretrained = text.partition(":")
        if not sep or not model or not pretrained:
            raise OpenClipError(
                f"--open-clip {text!r}: give MODEL:PRETRAINED, e.g. ViT-B-32:laion2b_s34b_b79k or "
                "ViT-B-32:/path/to/weights.pt"
            )
        return cls(model, pretrained)

    @property
    def is_file(self) -> bool:
        return "/" in self.pretrained or Path(self.pretrained).suffix in (".pt", ".bin", ".pth", ".safetensors")


def _open_clip() -> Any:
    try:
        import open_clip
    except ImportError:
        raise OpenClipError(
            "CLIP-family baselines need the open_clip package: pip install -e '.[clip]' (or pip install open-clip-torch)"
        ) from None
    return open_clip


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Hugging Face hub lookups from the local cache only (no request, no retries) inside the block."""
    import huggingface_hub.constants as constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def reachable(host: str, timeout: float = 3.0) -> bool:
    """Whether ``host`` resolves and accepts a connection on 443 (a quick probe, so an offline machine is told
    at once instead of after the hub client's retries)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_weights(spec: OpenClipSpec) -> str:
    """What ``open_clip`` loads for ``spec``: the file itself, or the cached file of the pretrained tag
    (downloaded first when the hub is reachable). Raises :class:`OpenClipError` naming the fix otherwise."""
    open_clip = _open_clip()
    if spec.model not in open_clip.list_models():
        raise OpenClipError(
            f"--open-clip {spec.model}:{spec.pretrained}: open_clip knows no model {spec.model!r} (open_clip.list_models() "
            "lists them, e.g. ViT-B-32, ViT-L-14, RN50)"
        )
    if spec.is_file:
        if not Path(spec.pretrained).is_file():
            raise OpenClipError(f"--open-clip {spec.model}:{spec.pretrained}: no weights file at {spec.pretrained}")
        return spec.pretrained
    tags = open_clip.list_pretrained_tags_by_model(spec.model)
    if spec.pretrained not in tags:
        raise OpenClipError(
            f"--open-clip {spec.model}:{spec.pretrained}: {spec.model} has no pretrained tag {spec.pretrained!r}; "
            f"its tags: {', '.join(tags) or 'none'} (or give a weights file: {spec.model}:/path/to/weights.pt)"
        )
    cfg = open_clip.get_pretrained_cfg(spec.model, spec.pretrained)
    from open_clip import pretrained as pretrained_module

    try:
        with hub_offline():
            return pretrained_module.download_pretrained(cfg)
    except Exception:  # noqa: BLE001 - not in the cache: download below, if the source can be reached
        pass
    url = cfg.get("url", "")
    host = HUB_HOST if cfg.get("hf_hub") else urlparse(url).hostname or HUB_HOST
    if not reachable(host):
        raise OpenClipError(
            f"--open-clip {spec.model}:{spec.pretrained}: its weights are not in the local cache and {host} cannot be "
            f"reached; fetch them once online (python -c \"import open_clip; open_clip.create_model_and_transforms("
            f"'{spec.model}', pretrained='{spec.pretrained}')\") or give a local file: --open-clip {spec.model}:/path/to/weights.pt"
        )
    try:
        return pretrained_module.download_pretrained(cfg)
    except Exception as error:  # noqa: BLE001 - any download failure is the user's one line
        raise OpenClipError(f"--open-clip {spec.model}:{spec.pretrained}: downloading its weights failed: {error}") from None


class OpenClipModel:
    """An ``open_clip`` model with its own image transform and tokenizer, embedding a table's rows as
    L2-normalised ``float32 [n, D]`` arrays (``encode_image`` / ``encode_text``, normalised)."""

    def __init__(self, spec: OpenClipSpec, weights: str, device: torch.device | None = None) -> None:
        open_clip = _open_clip()
        self.spec = spec
        self.device = device or torch.device("cpu")
        # the pretrained tag (its preprocessing settings come with it) read from the cache, or the file
        source = spec.pretrained if not spec.is_file else weights
        with hub_offline():
            model, _, preprocess = open_clip.create_model_and_transforms(spec.model, pretrained=source, device=self.device)
        self.model = model.eval()
        self.preprocess = preprocess
        self.tokenizer = open_clip.get_tokenizer(spec.model)

    @property
    def label(self) -> str:
        return f"{self.spec.model} ({Path(self.spec.pretrained).name if self.spec.is_file else self.spec.pretrained})"

    @torch.no_grad()
    def embed_images(self, paths: Sequence[str | Path]) -> np.ndarray:
        """Each image file decoded as the pipeline validates it, then the model's own transform."""
        out = []
        for start in range(0, len(paths), BATCH_SIZE):
            batch = [self.preprocess(load_image_rgb(p)) for p in paths[start : start + BATCH_SIZE]]
            out.append(F.normalize(self.model.encode_image(torch.stack(batch).to(self.device)).float(), dim=-1).cpu())
        return torch.cat(out).numpy().astype(np.float32)

    @torch.no_grad()
    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), BATCH_SIZE):
            tokens = self.tokenizer(list(texts[start : start + BATCH_SIZE])).to(self.device)
            out.append(F.normalize(self.model.encode_text(tokens).float(), dim=-1).cpu())
        return torch.cat(out).numpy().astype(np.float32)


def load_baselines(texts: Sequence[str], device: torch.device | None = None) -> list[OpenClipModel]:
    """Every ``--open-clip`` model, checked (weights found or fetched) before any is loaded."""
    specs = [OpenClipSpec.parse(text) for text in texts]
    weights = [resolve_weights(spec) for spec in specs]
    return [OpenClipModel(spec, path, device) for spec, path in zip(specs, weights, strict=True)]
