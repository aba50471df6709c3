"""``evaluating``: eval mode inside the block, each submodule's own mode after it, nothing switched in a model
already in eval mode."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lightning_tf.core import evaluating


class Counting(nn.Module):
    """A module that counts the calls of ``train`` (``eval`` is ``train(False)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.drop = nn.Dropout(0.5)

    def train(self, mode: bool = True) -> Counting:
        self.calls += 1
        return super().train(mode)


def _model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)))


def test_inside_the_block_dropout_is_off_and_every_module_is_in_eval_mode() -> None:
    model = _model().train()
    x = torch.randn(64, 4)
    with evaluating(model):
        assert not any(m.training for m in model.modules())
        torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)  # no dropout: deterministic
    assert all(m.training for m in model.modules())


def test_each_submodule_gets_back_its_own_mode() -> None:
    model = _model().train()
    model[2].eval()  # a frozen part kept in eval mode inside a training model
    before = [m.training for m in model.modules()]
    assert True in before and False in before
    with evaluating(model):
        pass
    assert [m.training for m in model.modules()] == before


def test_the_mode_comes_back_when_the_block_raises() -> None:
    model = _model().train()
    with pytest.raises(RuntimeError, match="inside"), evaluating(model):
        raise RuntimeError("inside")
    assert all(m.training for m in model.modules())


def test_a_model_in_eval_mode_is_not_switched() -> None:
    model = Counting().eval()
    model.calls = 0
    with evaluating(model):
        assert not model.drop.training
    assert model.calls == 0 and not any(m.training for m in model.modules())
    model.train()
    model.calls = 0
    with evaluating(model):
        assert not model.drop.training
    assert model.calls == 1 and all(m.training for m in model.modules())  # switched once, restored per module
