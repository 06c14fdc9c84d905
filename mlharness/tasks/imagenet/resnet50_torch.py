"""ResNet50-v1.5 as a PyTorch ``nn.Module`` with torchvision's parameter and buffer names, for ``model.factory``.

The MLPerf reference's PyTorch ResNet50 is torchvision's ``resnet50`` with the weights of zenodo 4588417
(``resnet50-19c8e357.pth``, a torchvision state dict). torchvision is not a dependency, so the architecture is
written out here; its ``state_dict()`` has exactly torchvision's keys (``layer4.2.bn3.running_var``,
``fc.weight``, ...), so that checkpoint loads with ``strict=True``. v1.5 puts the stride-2 of each down-sampling
bottleneck on the 3x3 convolution, as torchvision and the reference do.

The factory's module answers like the MLPerf graphs (``ArgMax:0`` int64 and ``softmax_tensor:0`` float32) so the
manifests' hooks see the same outputs in every framework; ``head="logits"`` gives torchvision's plain logits.
"""

from __future__ import annotations

import torch
from torch import nn

from mlharness.tasks.imagenet.resnet50_onnx import BN_EPS, EXPANSION, STAGES

HEADS = ("mlperf", "logits")


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carries the stride: v1.5), 1x1 expand, plus a projected shortcut in each stage's first block."""

    def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = width * EXPANSION
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width, eps=BN_EPS)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width, eps=BN_EPS)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels, eps=BN_EPS)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            # torchvision's names: downsample.0 (conv) and downsample.1 (batch norm)
            self.downsample = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out_channels, eps=BN_EPS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(y + shortcut)


class ResNet50(nn.Module):
    """torchvision's ``resnet50(num_classes=...)``: the same modules under the same names; ``forward`` gives logits."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64, eps=BN_EPS)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_channels = 64
        for s, (width, blocks) in enumerate(STAGES, start=1):
            stride = 1 if s == 1 else 2
            layers = []
            for b in range(blocks):
                layers.append(Bottleneck(in_channels, width, stride if b == 0 else 1))
                in_channels = width * EXPANSION
            setattr(self, f"layer{s}", nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        """torchvision's initialisation, so a random model has realistic activation scales."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class MLPerfResNet50(ResNet50):
    """The same parameters; answers (``ArgMax:0`` [N] int64, ``softmax_tensor:0`` [N, classes]) like the MLPerf
    ONNX and TensorFlow graphs, so the arg-max runs inside the timed model call as it does there."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        logits = super().forward(x)
        return logits.argmax(dim=1), torch.softmax(logits, dim=1)


def resnet50(num_classes: int = 1000, head: str = "mlperf") -> ResNet50:
    """``model.factory``: a randomly initialised ResNet50-v1.5; the predictor then loads ``weights_path`` into it
    (the 2017 torchvision checkpoint has no ``num_batches_tracked`` buffers; BatchNorm's loader fills them in)."""
    if head not in HEADS:
        raise ValueError(f"resnet50 head '{head}': expected one of {', '.join(HEADS)}")
    return MLPerfResNet50(num_classes) if head == "mlperf" else ResNet50(num_classes)
