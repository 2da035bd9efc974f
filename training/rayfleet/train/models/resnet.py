"""ResNet-18 for 1-channel 28x28 images: torchvision's model with a 1-channel stem (as the blueprint)."""

from __future__ import annotations

import torch


def resnet18_grayscale(num_classes: int = 10) -> torch.nn.Module:
    # Imported here, not at the top: torchvision's package import pulls in torch._dynamo (several seconds on
    # two cores), which the job's driver and Ray Train's controller import rayfleet.train.ddp for but never use.
    from torchvision.models import resnet18

    model = resnet18(num_classes=num_classes)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model
