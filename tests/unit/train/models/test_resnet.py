"""ResNet-18 for 28x28 grayscale images: one input channel, ten logits."""

from __future__ import annotations

import torch

from rayfleet.train.models.resnet import resnet18_grayscale


def test_resnet18_takes_one_channel_and_gives_ten_logits():
    model = resnet18_grayscale()
    assert model(torch.zeros(4, 1, 28, 28)).shape == (4, 10)
    assert model.conv1.in_channels == 1
    assert 11_100_000 < sum(p.numel() for p in model.parameters()) < 11_200_000
