"""The CPU GRU stepping of ``models.recurrent`` against ``nn.GRU`` itself: final states and every gradient,
one direction and two, texts of every length. At the project's sizes (word vectors 32 or 200, hidden 32 or
256) they are bit for bit equal on this machine's BLAS; at toy sizes the BLAS picks other kernels for the
one input product and the last bit may differ, so the test holds them to 1e-6."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from models.recurrent import gru_final_states

LENGTHS = {
    "mixed": [7, 1, 12, 12, 3, 9, 5, 2],
    "all one token": [1] * 8,
    "all full": [12] * 8,
    "single text": [5],
}


@pytest.mark.parametrize("sizes", [(6, 5), (32, 32), (200, 256)])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("case", LENGTHS)
def test_final_states_and_gradients_equal_nn_gru(bidirectional, case, sizes):
    torch.manual_seed(0)
    gru = nn.GRU(sizes[0], sizes[1], batch_first=True, bidirectional=bidirectional)
    lengths = torch.tensor(LENGTHS[case])
    words = torch.randn(len(lengths), 12, sizes[0], requires_grad=True)

    def run(final_states):
        gru.zero_grad()
        words.grad = None
        packed = pack_padded_sequence(words, lengths, batch_first=True, enforce_sorted=False)
        states = final_states(packed)
        (states * torch.linspace(-1, 1, states.numel()).view_as(states)).sum().backward()
        return states.detach(), words.grad.clone(), {n: p.grad.clone() for n, p in gru.named_parameters()}

    expected = run(lambda packed: gru(packed)[1])
    actual = run(lambda packed: gru_final_states(gru, packed))
    close = {"atol": 1e-6, "rtol": 0}
    torch.testing.assert_close(actual[0], expected[0], **close)
    torch.testing.assert_close(actual[1], expected[1], **close)
    for name in expected[2]:
        torch.testing.assert_close(actual[2][name], expected[2][name], **close)


def test_under_no_grad_too():
    torch.manual_seed(1)
    gru = nn.GRU(4, 3, batch_first=True)
    packed = pack_padded_sequence(torch.randn(6, 9, 4), torch.tensor([9, 2, 4, 4, 1, 7]), batch_first=True, enforce_sorted=False)
    with torch.no_grad():
        torch.testing.assert_close(gru_final_states(gru, packed), gru(packed)[1], atol=1e-6, rtol=0)
