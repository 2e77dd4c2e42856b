"""Image classifiers on CIFAR-10-shaped synthetic data: ResNet-18 and MobileNet-v3-small.

``train_resnet18`` (``resnet18_cifar``) is the HyperSack paper's SP3 model: the CIFAR variant of
ResNet-18 (3x3 stem, no max-pool, four stages of two basic blocks, BatchNorm), stage widths
``width`` x (1, 2, 4, 8) (``width`` 64: the standard 11.2M-parameter model). ``train_mobilenet``
(``mobilenet_v3_small``) is MobileNet-v3-small (depthwise separable inverted residuals,
squeeze-and-excitation, hard-swish; 1.5M parameters at ``width`` 16) with a stride-1 stem for
32x32 inputs; every channel count is scaled by ``width`` / 16.

``train_image_model`` (``cifar_classifier``) trains the one its config's ``model`` names. With
``data: pipeline`` the images come as uint8 through a DataLoader with CPU augmentation
(``hypersack.workloads.pipeline``).

Both are written in plain torch (no torchvision) and train on ``train_size`` images of
``channels`` x ``image_size`` x ``image_size`` (3 x 32 x 32) in ``classes`` (10) classes: each
image is its class's fixed random prototype plus unit Gaussian noise (``hypersack.workloads.
synthetic`` describes the shared config keys, the loop and the metrics). Defaults:
``batch_size`` 128, ``train_size`` 4096, ``val_size`` 256, ``width`` 64 (ResNet) / 16
(MobileNet). ``RESNET18`` and ``MOBILENET`` are the fusable tasks with the default data; build
others with ``SyntheticTask(RESNET18_WORKLOAD, train_size=...)``.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn
from torch.nn import functional as F

from hypersack.workloads.synthetic import (DATA_SEED, SyntheticTask, Workload, count, fit)

__all__ = ["ResNet18", "MobileNetV3Small", "train_resnet18", "train_mobilenet", "image_data",
           "train_image_model", "IMAGE_MODELS",
           "RESNET18_WORKLOAD", "MOBILENET_WORKLOAD", "RESNET18", "MOBILENET"]

# ``data`` is a data key: a fused task (device-resident synthetic data) refuses ``pipeline``
# configs, so ``execution: auto`` runs them as plain trials and ``fused`` fails them loudly.
_DATA_KEYS = ("train_size", "val_size", "image_size", "channels", "classes", "data")
_DATA_DEFAULTS = {"train_size": 4096, "val_size": 256, "image_size": 32, "channels": 3,
                  "classes": 10, "batch_size": 128, "data": "synthetic"}


# ---- data --------------------------------------------------------------------------------------

def image_data(config: Mapping[str, Any]):
    """``(x_train, y_train, x_val, y_val)``: prototype-plus-noise images, float32, on the CPU."""
    n_train, n_val = count(config, "train_size", 4096), count(config, "val_size", 256)
    size, channels = count(config, "image_size", 32), count(config, "channels", 3)
    classes = count(config, "classes", 10)
    g = torch.Generator().manual_seed(DATA_SEED)
    prototypes = torch.randn(classes, channels, size, size, generator=g)
    y = torch.randint(0, classes, (n_train + n_val,), generator=g)
    x = prototypes[y] + torch.randn(n_train + n_val, channels, size, size, generator=g)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def classification_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets, reduction="none")


def classification_metrics(outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    loss = F.cross_entropy(outputs, targets).item()
    accuracy = (outputs.argmax(dim=1) == targets).to(outputs.dtype).mean().item()
    return {"accuracy": accuracy, "loss": loss}


# ---- ResNet-18 ---------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR ResNet-18 with stage widths ``width`` x (1, 2, 4, 8)."""

    def __init__(self, width: int = 64, classes: int = 10, channels: int = 3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        blocks, cin = [], width
        for mult, stride in ((1, 1), (2, 2), (4, 2), (8, 2)):
            cout = width * mult
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.blocks(self.stem(x))
        return self.head(out.mean(dim=(2, 3)))


# ---- MobileNet-v3-small ------------------------------------------------------------------------

# (kernel, expanded channels, out channels, squeeze-excite, hard-swish, stride): Howard et al.
# 2019, Table 2.
_MOBILENET_V3_SMALL = (
    (3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2), (3, 88, 24, False, False, 1),
    (5, 96, 40, True, True, 2), (5, 240, 40, True, True, 1), (5, 240, 40, True, True, 1),
    (5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1), (5, 288, 96, True, True, 2),
    (5, 576, 96, True, True, 1), (5, 576, 96, True, True, 1))


def _scaled(channels: int, factor: float) -> int:
    return max(2, int(round(channels * factor)))


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        hidden = max(2, channels // 4)
        self.reduce = nn.Conv2d(channels, hidden, 1)
        self.expand = nn.Conv2d(hidden, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = F.relu(self.reduce(x.mean(dim=(2, 3), keepdim=True)))
        return x * F.hardsigmoid(self.expand(scale))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, hswish: bool,
                 stride: int):
        super().__init__()
        act: type[nn.Module] = nn.Hardswish if hswish else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers += [nn.Conv2d(cin, expanded, 1, bias=False), nn.BatchNorm2d(expanded), act()]
        layers += [nn.Conv2d(expanded, expanded, kernel, stride, kernel // 2, groups=expanded,
                             bias=False), nn.BatchNorm2d(expanded), act()]
        if se:
            layers.append(SqueezeExcite(expanded))
        layers += [nn.Conv2d(expanded, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        return x + out if self.residual else out


class MobileNetV3Small(nn.Module):
    """MobileNet-v3-small for 32x32 inputs; channel counts x ``width`` / 16."""

    def __init__(self, width: int = 16, classes: int = 10, channels: int = 3,
                 dropout: float = 0.0):
        super().__init__()
        factor = width / 16
        stem = _scaled(16, factor)
        self.stem = nn.Sequential(nn.Conv2d(channels, stem, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(stem), nn.Hardswish())
        blocks, cin = [], stem
        for kernel, expanded, cout, se, hswish, stride in _MOBILENET_V3_SMALL:
            cout = _scaled(cout, factor)
            blocks.append(InvertedResidual(cin, kernel, _scaled(expanded, factor), cout, se,
                                           hswish, stride))
            cin = cout
        last = _scaled(576, factor)
        self.blocks = nn.Sequential(*blocks)
        self.last = nn.Sequential(nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last),
                                  nn.Hardswish())
        hidden = _scaled(1024, factor)
        self.head = nn.Sequential(nn.Linear(last, hidden), nn.Hardswish(), nn.Dropout(dropout),
                                  nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.last(self.blocks(self.stem(x)))
        return self.head(out.mean(dim=(2, 3)))


# ---- workloads ---------------------------------------------------------------------------------

def _build_resnet(config: Mapping[str, Any]) -> nn.Module:
    return ResNet18(count(config, "width", 64), count(config, "classes", 10),
                    count(config, "channels", 3))


def _build_mobilenet(config: Mapping[str, Any]) -> nn.Module:
    from hypersack.workloads.synthetic import dropout_rate
    return MobileNetV3Small(count(config, "width", 16), count(config, "classes", 10),
                            count(config, "channels", 3), dropout_rate(config))


RESNET18_WORKLOAD = Workload(
    name="resnet18_cifar", build=_build_resnet, data=image_data,
    per_sample_loss=classification_loss, metrics=classification_metrics,
    model_keys=("width",), data_keys=_DATA_KEYS, defaults={**_DATA_DEFAULTS, "width": 64})

MOBILENET_WORKLOAD = Workload(
    name="mobilenet_v3_small", build=_build_mobilenet, data=image_data,
    per_sample_loss=classification_loss, metrics=classification_metrics,
    model_keys=("width",), data_keys=_DATA_KEYS, defaults={**_DATA_DEFAULTS, "width": 16})


def train_resnet18(config: Mapping[str, Any], ctx: Any, precision: str = "fp32") -> None:
    """CIFAR ResNet-18 on synthetic CIFAR-10-shaped images (see the module docstring)."""
    fit(RESNET18_WORKLOAD, config, ctx, precision)


def train_mobilenet(config: Mapping[str, Any], ctx: Any, precision: str = "fp32") -> None:
    """MobileNet-v3-small on synthetic CIFAR-10-shaped images (see the module docstring)."""
    fit(MOBILENET_WORKLOAD, config, ctx, precision)


IMAGE_MODELS = {"resnet18_cifar": RESNET18_WORKLOAD, "mobilenet_v3_small": MOBILENET_WORKLOAD}


def train_image_model(config: Mapping[str, Any], ctx: Any, precision: str = "fp32") -> None:
    """``cifar_classifier``: the model ``config["model"]`` names (``resnet18_cifar``, the
    default, or ``mobilenet_v3_small``), so one study searches over both (the paper's SP3-like
    mixes). Not fusable: its packs would mix architectures."""
    from hypersack.workloads.synthetic import choice
    name = choice(config, "model", "resnet18_cifar", tuple(IMAGE_MODELS))
    fit(IMAGE_MODELS[name], {k: v for k, v in config.items() if k != "model"}, ctx, precision)


RESNET18 = SyntheticTask(RESNET18_WORKLOAD)
MOBILENET = SyntheticTask(MOBILENET_WORKLOAD)
