"""RetinaNet with a ResNeXt50-32x4d-FPN backbone (the MLPerf model's architecture: 264 classes, 9 anchors per
location, P3-P7, four-conv class and box heads, torchvision's box coding) with random weights, for performance
runs without the download. Batch norm is folded away (plain biased convolutions), and the final non-maximum
suppression is replaced by the 300 best detections (the model's ``detections_per_img``), so the ONNX export
needs no torchvision ops."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

CLASSES = 264
SCALES = (1.0, 2 ** (1 / 3), 2 ** (2 / 3))
RATIOS = (0.5, 1.0, 2.0)
TOPK_PER_LEVEL = 1000
DETECTIONS = 300
PRIOR = 0.01
BBOX_CLIP = math.log(1000.0 / 16)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, cout: int, stride: int, groups: int):
        super().__init__()
        self.c1 = nn.Conv2d(cin, width, 1)
        self.c2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups)
        self.c3 = nn.Conv2d(width, cout, 1)
        self.down = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c3(torch.relu(self.c2(torch.relu(self.c1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


def _head(ch: int, out: int, bias: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Conv2d(ch, ch, 3, 1, 1), nn.ReLU()]
    last = nn.Conv2d(ch, out, 3, 1, 1)
    nn.init.normal_(last.weight, std=0.01)
    nn.init.constant_(last.bias, bias)
    return nn.Sequential(*layers, last)


class RandomRetinaNet(nn.Module):
    def __init__(self, size: int = 800, tiny: bool = False, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        div = 8 if tiny else 1
        groups = 32 // div
        self.size = size
        self.stem = nn.Conv2d(3, 64 // div, 7, 2, 3)
        stages, cin = [], 64 // div
        for planes, blocks, stride in zip((64, 128, 256, 512), (1, 1, 1, 1) if tiny else (3, 4, 6, 3),
                                          (1, 2, 2, 2), strict=True):
            width, cout = 2 * planes // div, 4 * planes // div
            seq = [Bottleneck(cin if b == 0 else cout, width, cout, stride if b == 0 else 1, groups)
                   for b in range(blocks)]
            stages.append(nn.Sequential(*seq))
            cin = cout
        self.stages = nn.ModuleList(stages)
        fpn = 256 // div
        self.lateral = nn.ModuleList(nn.Conv2d(c, fpn, 1) for c in (512 // div, 1024 // div, 2048 // div))
        self.smooth = nn.ModuleList(nn.Conv2d(fpn, fpn, 3, 1, 1) for _ in range(3))
        self.p6 = nn.Conv2d(fpn, fpn, 3, 2, 1)
        self.p7 = nn.Conv2d(fpn, fpn, 3, 2, 1)
        a = len(SCALES) * len(RATIOS)
        self.cls_head = _head(fpn, a * CLASSES, -math.log((1 - PRIOR) / PRIOR))
        self.box_head = _head(fpn, a * 4, 0.0)
        grids, n = [], size
        for level in range(1, 8):  # every stride-2 layer (padded convolutions, max pool) gives ceil(n / 2)
            n = -(-n // 2)
            if level >= 3:
                grids.append(n)
        self.anchors = [torch.from_numpy(_anchors(g, 2 ** level)) for g, level in zip(grids, range(3, 8), strict=True)]

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = nn.functional.max_pool2d(torch.relu(self.stem(images)), 3, 2, 1)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        c3, c4, c5 = feats[1:]
        p5 = self.lateral[2](c5)
        p4 = self.lateral[1](c4) + nn.functional.interpolate(p5, size=c4.shape[-2:], mode="nearest")
        p3 = self.lateral[0](c3) + nn.functional.interpolate(p4, size=c3.shape[-2:], mode="nearest")
        p3, p4, p5 = self.smooth[0](p3), self.smooth[1](p4), self.smooth[2](p5)
        p6 = self.p6(p5)
        p7 = self.p7(torch.relu(p6))
        all_boxes, all_scores, all_labels = [], [], []
        for feat, anchors in zip((p3, p4, p5, p6, p7), self.anchors, strict=True):
            logits = self.cls_head(feat).permute(0, 2, 3, 1).reshape(-1)  # [H*W*A*C]
            deltas = self.box_head(feat).permute(0, 2, 3, 1).reshape(-1, 4)  # [H*W*A, 4]
            scores, idx = torch.sigmoid(logits).topk(min(TOPK_PER_LEVEL, logits.shape[0]))
            anchor_idx = torch.div(idx, CLASSES, rounding_mode="floor")
            all_boxes.append(_decode(deltas[anchor_idx], anchors[anchor_idx], self.size))
            all_scores.append(scores)
            all_labels.append(idx % CLASSES)
        scores, order = torch.cat(all_scores).topk(DETECTIONS)
        return torch.cat(all_boxes)[order], scores, torch.cat(all_labels)[order]


def _anchors(n: int, stride: int) -> np.ndarray:
    """[n*n*A, 4] xyxy anchors of one n x n level (torchvision's AnchorGenerator order: location-major)."""
    base = 4 * stride
    cell = []
    for r in RATIOS:
        for s in SCALES:
            h, w = base * s * math.sqrt(r), base * s / math.sqrt(r)
            cell.append((-w / 2, -h / 2, w / 2, h / 2))
    shifts = np.arange(n, dtype=np.float32) * stride
    sy, sx = np.meshgrid(shifts, shifts, indexing="ij")
    shift = np.stack([sx, sy, sx, sy], axis=-1).reshape(-1, 1, 4)
    return np.round(shift + np.asarray(cell, np.float32)[None]).reshape(-1, 4).astype(np.float32)


def _decode(d: torch.Tensor, a: torch.Tensor, size: int) -> torch.Tensor:
    w, h = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    cx, cy = a[:, 0] + 0.5 * w, a[:, 1] + 0.5 * h
    pcx, pcy = d[:, 0] * w + cx, d[:, 1] * h + cy
    pw, ph = torch.exp(d[:, 2].clamp(max=BBOX_CLIP)) * w, torch.exp(d[:, 3].clamp(max=BBOX_CLIP)) * h
    boxes = torch.stack([pcx - pw / 2, pcy - ph / 2, pcx + pw / 2, pcy + ph / 2], dim=1)
    return boxes.clamp(0, size)
