"""Training settings, with the trainer that reads them; profiles (pipeline/profiles.py) choose values."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation of §3.3: Adam 1e-4, weight decay 1e-5, batch 64, plateau decay x0.1 after 5 epochs."""

    backbone: str = "resnet50"
    pretrained: bool = True
    image_size: int = 224
    embed_dim: int = 256
    gru_hidden: int = 512
    max_text_tokens: int = 64
    batch_size: int = 64
    epochs: int = 30
    learning_rate: float = 1e-4
    weight_decay: float = 1e-5
    lr_patience: int = 5
    lr_factor: float = 0.1
    horizontal_flip: bool = True
    #: how the sampled neighbour i' of Eq. 5 reaches the batch: "in_batch" fills half of each batch with
    #: the anchors' neighbours (same rows encoded as the baseline), "extra_rows" encodes them as extra rows.
    neighbor_mode: str = "in_batch"
    #: in ``in_batch``, an anchor and its sampled neighbour are not cross-modal negatives of each other
    #: (False: the neighbour pair is an ordinary negative, which fights L_text / L_img)
    mask_neighbor_pairs: bool = True
    #: "finetune": the trunk trains end to end on pixels (paper §3.3); "frozen": it is run once and its
    #: cached features train the projection and the text tower (VSE++ / PVSE's precomputed-feature mode)
    trunk: str = "finetune"
    #: stop when the validation loss has not improved for this many epochs (None: run every epoch)
    early_stopping_patience: int | None = None
    num_workers: int = 0
