"""ResNet-18 for 1-channel 28x28 images: torchvision's model with a 1-channel stem (as the blueprint)."""

from __future__ import annotations

import torch
from torchvision.models import resnet18


def resnet18_grayscale(num_classes: int = 10) -> torch.nn.Module:
    model = resnet18(num_classes=num_classes)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model
