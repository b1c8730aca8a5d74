"""The final hidden states of a one-layer GRU over a packed batch of texts, computed on the CPU without
PyTorch's slicing overhead.

Why: on the CPU, ``nn.GRU`` over a ``PackedSequence`` steps through time slicing its input with ``narrow``;
the backward of each slice allocates and zero-fills a tensor the size of the whole packed input, and those
fills took 40% of a demo training step (``torch.profiler``, 1 thread). Here the input projection of every
token is one matrix product split into per-step blocks (``split``: its backward is one concatenation) and
the gates are stepped explicitly; the equations and the order of operations are ``nn.GRU``'s, so states and
gradients are bit-identical to it (``tests/test_recurrent.py``) at about half the time
(``benchmarks/bench_gru.py``). On CUDA ``nn.GRU`` itself runs (cuDNN's fused kernel).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence


def gru_final_states(gru: nn.GRU, packed: PackedSequence) -> Tensor:
    """``h_n`` of ``gru`` over ``packed`` (``[directions, B, H]``, batch in the caller's order), as
    ``gru(packed)[1]`` gives it."""
    if packed.data.is_cuda or gru.num_layers != 1 or not isinstance(gru, nn.GRU):
        return gru(packed)[1]
    sizes = packed.batch_sizes.tolist()
    states = [_forward_direction(gru, packed.data, sizes)]
    if gru.bidirectional:
        states.append(_backward_direction(gru, packed.data, sizes))
    final = torch.stack(states)  # rows in the packed (longest-first) order
    return final if packed.unsorted_indices is None else final.index_select(1, packed.unsorted_indices)


def _weights(gru: nn.GRU, suffix: str) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
    return tuple(getattr(gru, name + suffix, None) for name in names)


def _step(inputs: Tensor, hidden: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """One GRU step from the input's precomputed projection ``W_ih x + b_ih``."""
    input_r, input_z, input_n = inputs.chunk(3, 1)
    hidden_r, hidden_z, hidden_n = F.linear(hidden, w_hh, b_hh).chunk(3, 1)
    reset = torch.sigmoid(input_r + hidden_r)
    update = torch.sigmoid(input_z + hidden_z)
    new = torch.tanh(input_n + reset * hidden_n)
    return new + update * (hidden - new)


def _forward_direction(gru: nn.GRU, data: Tensor, sizes: list[int]) -> Tensor:
    """Left to right: a text's state is final at its last token, when the batch shrinks past its row."""
    w_ih, w_hh, b_ih, b_hh = _weights(gru, "")
    steps = F.linear(data, w_ih, b_ih).split(sizes)
    hidden = data.new_zeros(sizes[0], gru.hidden_size)
    finished = []
    for inputs, size in zip(steps, sizes, strict=True):
        if size < hidden.shape[0]:
            finished.append(hidden[size:])
            hidden = hidden[:size]
        hidden = _step(inputs, hidden, w_hh, b_hh)
    finished.append(hidden)
    return torch.cat(finished[::-1])


def _backward_direction(gru: nn.GRU, data: Tensor, sizes: list[int]) -> Tensor:
    """Right to left: a text starts (from a zero state) at its last token, when the batch grows past its row;
    every state is final after the first token."""
    w_ih, w_hh, b_ih, b_hh = _weights(gru, "_reverse")
    steps = F.linear(data, w_ih, b_ih).split(sizes)
    hidden = data.new_zeros(0, gru.hidden_size)
    for inputs, size in zip(reversed(steps), reversed(sizes), strict=True):
        if size > hidden.shape[0]:
            hidden = torch.cat([hidden, data.new_zeros(size - hidden.shape[0], gru.hidden_size)])
        hidden = _step(inputs, hidden, w_hh, b_hh)
    return hidden


# ------------------------------------------------------------------------------ fixed width (CUDA graphs)
# Why a second way to the same final states: packing reads the lengths on the host and gives every batch
# its own shapes (``batch_sizes``), so a step built on it can be neither captured in a CUDA graph nor
# replayed. Here the GRU runs over the whole padded width (cuDNN's dense kernel on CUDA) and each text's
# final state is gathered at its length on the device; the states are the packed run's up to float
# summation order (``tests/test_static_step.py``).


def fixed_width_final_states(gru: nn.GRU, words: Tensor, lengths: Tensor) -> Tensor:
    """``h_n`` (``[directions, B, H]``) of a one-layer batch-first ``gru`` over ``words`` ``[B, L, D]`` padded
    to a fixed width, with ``lengths`` ``[B]`` (>= 1) on ``words``' device: what ``gru(packed)[1]`` gives.

    Forward direction: the output at position ``length - 1``; padding after it never reaches that state.
    Backward direction: the same GRU run over each text right-aligned in the width (an index gather on the
    device), so it reads the text from its last token to its first before any padding; its output at
    position ``L - length`` is that final state. One GRU call over both layouts (2B rows) keeps it one cuDNN
    kernel; the direction read from each half is the one its layout serves (the other half's work is wasted,
    a bidirectional GRU is only PVSE's text tower)."""
    if gru.num_layers != 1 or not gru.batch_first:
        raise ValueError("fixed-width final states are implemented for one-layer batch-first GRUs")
    batch, width = words.shape[:2]
    last = lengths - 1
    if not gru.bidirectional:
        return _at_positions(gru(words)[0], last).unsqueeze(0)
    outputs = gru(torch.cat([words, right_aligned(words, lengths)]))[0]
    hidden = gru.hidden_size
    forward = _at_positions(outputs[:batch, :, :hidden], last)
    backward = _at_positions(outputs[batch:, :, hidden:], width - lengths)
    return torch.stack([forward, backward])


def right_aligned(words: Tensor, lengths: Tensor) -> Tensor:
    """``words`` ``[B, L, D]`` with row b's first ``lengths[b]`` positions moved to the end of the width (the
    positions before them repeat position 0: whatever they hold is read after the backward state is final)."""
    width = words.shape[1]
    source = torch.arange(width, device=words.device).unsqueeze(0) - (width - lengths).unsqueeze(1)
    index = source.clamp_(min=0).unsqueeze(-1).expand(-1, -1, words.shape[2])
    return words.gather(1, index)


def _at_positions(outputs: Tensor, positions: Tensor) -> Tensor:
    """Row b of ``outputs`` ``[B, L, H]`` at position ``positions[b]``: ``[B, H]``."""
    index = positions.view(-1, 1, 1).expand(-1, 1, outputs.shape[2])
    return outputs.gather(1, index).squeeze(1)


@contextmanager
def fixed_width_text(model: nn.Module) -> Iterator[None]:
    """Within the block, every text tower of ``model`` (a module with a ``fixed_width`` attribute) computes
    its GRU's final states with :func:`fixed_width_final_states`: tokens at the full width, lengths on the
    device, no packing. The static training step runs the model in it; everything else packs, as always."""
    towers = [module for module in model.modules() if hasattr(module, "fixed_width")]
    before = [tower.fixed_width for tower in towers]
    for tower in towers:
        tower.fixed_width = True
    try:
        yield
    finally:
        for tower, value in zip(towers, before, strict=True):
            tower.fixed_width = value
