"""Masked statistics against values computed by hand / with the statistics module."""

import statistics

import pytest
import torch
from verl.utils import torch_functional as verl_F

VALUES = torch.tensor([[1.0, 2.0, 3.0, 50.0], [4.0, 6.0, -7.0, -9.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.float64)
SELECTED = [1.0, 2.0, 3.0, 4.0, 6.0]


def test_masked_sum_and_mean():
    assert verl_F.masked_sum(VALUES, MASK).item() == 16.0
    assert verl_F.masked_mean(VALUES, MASK).item() == pytest.approx(16 / 5)
    assert torch.allclose(
        verl_F.masked_mean(VALUES, MASK, axis=-1), torch.tensor([2.0, 5.0], dtype=torch.float64)
    )
    assert torch.allclose(
        verl_F.masked_sum(VALUES, MASK, axis=0), torch.tensor([5.0, 8.0, 3.0, 0.0], dtype=torch.float64)
    )
    # an empty row has mean 0, not NaN
    assert verl_F.masked_mean(VALUES, torch.zeros_like(MASK), axis=-1).tolist() == [0.0, 0.0]


def test_masked_var_and_whiten():
    assert verl_F.masked_var(VALUES, MASK).item() == pytest.approx(statistics.variance(SELECTED))
    assert verl_F.masked_var(VALUES, MASK, unbiased=False).item() == pytest.approx(
        statistics.pvariance(SELECTED)
    )
    single = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0] * 4], dtype=torch.float64)
    assert verl_F.masked_var(VALUES, single).item() == 0.0
    with pytest.raises(ValueError, match="selects no element"):
        verl_F.masked_var(VALUES, torch.zeros_like(MASK))
    w = verl_F.masked_whiten(VALUES, MASK)
    mu, sd = statistics.mean(SELECTED), statistics.stdev(SELECTED)
    assert w[MASK > 0].tolist() == pytest.approx([(x - mu) / sd for x in SELECTED], rel=1e-6)
    w2 = verl_F.masked_whiten(VALUES, MASK, shift_mean=False)
    assert w2[MASK > 0].tolist() == pytest.approx([(x - mu) / sd + mu for x in SELECTED], rel=1e-6)


def test_clip_by_value_and_logprobs_from_logits():
    x = torch.tensor([0.0, 5.0, -5.0])
    assert verl_F.clip_by_value(
        x, torch.tensor([-1.0, 1.0, -2.0]), torch.tensor([1.0, 2.0, 0.0])
    ).tolist() == [0.0, 2.0, -2.0]
    logits = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]])
    lp = verl_F.logprobs_from_logits(logits, torch.tensor([[2, 1]]))
    z = torch.logsumexp(torch.tensor([1.0, 2.0, 3.0]), 0).item()
    assert lp.tolist()[0] == pytest.approx([3.0 - z, -torch.log(torch.tensor(3.0)).item()])
