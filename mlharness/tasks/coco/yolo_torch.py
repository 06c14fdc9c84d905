"""A YOLO-shaped detector with random weights, for performance runs of the YOLO benchmark's interface without
Ultralytics: CSP (C2f) backbone with SPPF, FPN/PAN neck, decoupled anchor-free head with DFL box regression at
strides 8/16/32, the YOLOv11-L channel widths (64-512), SiLU activations, batch norm folded away. It is not the
exact YOLOv11 layer graph (no C3k2/C2PSA attention), but it has the same input, output and decoding:
``images`` [1, 3, S, S] -> ``output0`` [1, 84, anchors] (cx, cy, w, h in pixels, sigmoid class scores). The
class biases start as Ultralytics initialises them (log(5 / nc / (640 / stride)^2)), so a random model proposes
few boxes above the reference's 0.001 confidence, like a trained one."""

from __future__ import annotations

import math

import torch
from torch import nn

CLASSES = 80
REG_MAX = 16
STRIDES = (8, 16, 32)


class Conv(nn.Module):
    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(self.conv(x))


class C2f(nn.Module):
    def __init__(self, c1: int, c2: int, n: int):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c)
        self.cv2 = Conv((2 + n) * self.c, c2)
        self.m = nn.ModuleList(nn.Sequential(Conv(self.c, self.c, 3), Conv(self.c, self.c, 3)) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.cv1, self.cv2 = Conv(c, c // 2), Conv(c // 2 * 4, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(nn.functional.max_pool2d(y[-1], 5, 1, 2))
        return self.cv2(torch.cat(y, 1))


class RandomYolo(nn.Module):
    def __init__(self, size: int = 640, tiny: bool = False, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        d = 8 if tiny else 1
        n = 1 if tiny else 2
        c1, c2, c3, c4 = 64 // d, 128 // d, 256 // d, 512 // d
        self.size = size
        self.stem = nn.Sequential(Conv(3, c1, 3, 2), Conv(c1, c2, 3, 2), C2f(c2, c3, n))
        self.s3 = nn.Sequential(Conv(c3, c3, 3, 2), C2f(c3, c4, n))  # stride 8
        self.s4 = nn.Sequential(Conv(c4, c4, 3, 2), C2f(c4, c4, n))  # stride 16
        self.s5 = nn.Sequential(Conv(c4, c4, 3, 2), C2f(c4, c4, n), SPPF(c4))  # stride 32
        self.up4, self.up3 = C2f(2 * c4, c4, n), C2f(2 * c4, c3, n)
        self.down4, self.pan4 = Conv(c3, c3, 3, 2), C2f(c3 + c4, c4, n)
        self.down5, self.pan5 = Conv(c4, c4, 3, 2), C2f(2 * c4, c4, n)
        box_c, cls_c = max(16, c3 // 4, REG_MAX * 4), max(c3, min(CLASSES, 100))
        self.box = nn.ModuleList(nn.Sequential(Conv(c, box_c, 3), Conv(box_c, box_c, 3),
                                               nn.Conv2d(box_c, 4 * REG_MAX, 1)) for c in (c3, c4, c4))
        self.cls = nn.ModuleList(nn.Sequential(Conv(c, cls_c, 3), Conv(cls_c, cls_c, 3),
                                               nn.Conv2d(cls_c, CLASSES, 1)) for c in (c3, c4, c4))
        for box, cls, s in zip(self.box, self.cls, STRIDES, strict=True):
            nn.init.constant_(box[-1].bias, 1.0)
            nn.init.constant_(cls[-1].bias, math.log(5 / CLASSES / (640 / s) ** 2))
        points, strides = [], []
        for s in STRIDES:
            g = size // s
            ys, xs = torch.meshgrid(torch.arange(g) + 0.5, torch.arange(g) + 0.5, indexing="ij")
            points.append(torch.stack([xs.reshape(-1), ys.reshape(-1)]))
            strides.append(torch.full((1, g * g), float(s)))
        self.register_buffer("points", torch.cat(points, 1))  # [2, anchors]
        self.register_buffer("strides", torch.cat(strides, 1))  # [1, anchors]
        self.register_buffer("bins", torch.arange(REG_MAX, dtype=torch.float32).view(1, 1, REG_MAX, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stem(images)
        p3 = self.s3(x)
        p4 = self.s4(p3)
        p5 = self.s5(p4)
        n4 = self.up4(torch.cat([nn.functional.interpolate(p5, scale_factor=2.0), p4], 1))
        o3 = self.up3(torch.cat([nn.functional.interpolate(n4, scale_factor=2.0), p3], 1))
        o4 = self.pan4(torch.cat([self.down4(o3), n4], 1))
        o5 = self.pan5(torch.cat([self.down5(o4), p5], 1))
        box = torch.cat([b(f).flatten(2) for b, f in zip(self.box, (o3, o4, o5), strict=True)], 2)
        cls = torch.cat([c(f).flatten(2) for c, f in zip(self.cls, (o3, o4, o5), strict=True)], 2)
        dist = (box.view(1, 4, REG_MAX, -1).softmax(2) * self.bins).sum(2)  # DFL: [1, 4, anchors]
        lt, rb = dist[:, :2], dist[:, 2:]
        x0y0, x1y1 = self.points - lt, self.points + rb
        xywh = torch.cat([(x0y0 + x1y1) / 2, x1y1 - x0y0], 1) * self.strides
        return torch.cat([xywh, cls.sigmoid()], 1)
