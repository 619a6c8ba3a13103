"""The CIFAR-10 image classifiers of the MXNet documents clipflow automates, in plain torch.

Each takes one batch of images (N, 3, H, W) and returns (N, num_classes):

- ``resnet18_v1``: the network of MXNet's "Distributed Training using Gluon" tutorial
  (example/distributed_training/cifar10_dist.py builds ``gluon.model_zoo.vision.resnet18_v1()``): the
  ImageNet ResNet-18 v1 unchanged (7x7 stride-2 stem and max pool, no thumbnail stem), fed the whole
  32 x 32 CIFAR-10 images. The tutorial keeps the model zoo's default of 1000 outputs; a recipe sets its own.
- ``vgg11``: the network of MXNet's "Distributed Training in MXNet" page, ``image_classification.py
  --dataset cifar10 --model vgg11``: the model zoo's VGG-11 without BatchNorm, 32 x 32 images, 10 classes.
  Gluon infers the first dense layer's inputs from the image, so at 32 x 32 it reads 512 features
  (1 x 1 x 512), not the 25,088 (7 x 7 x 512) of the ImageNet model.
- ``cifar_resnext110``: the network of "Training MXNet part 4", ``train_cifar10.py --network resnext
  --num-layers 110`` (example/image-classification/symbols/resnext.py). For CIFAR and fewer than 164 layers
  that symbol builds basic (two 3x3, ungrouped) units, 18 per stage over 16, 32 and 64 channels: a
  ResNet-110 whose every stage opens with a projection shortcut, after a BatchNorm of the input with its
  scale held at 1 and a bare 3x3 convolution. The grouping of a ResNeXt applies only to its bottleneck
  units (164 layers and more). train_cifar10.py trains it on 28 x 28 crops.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv3x3(dim_in: int, dim_out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(dim_in, dim_out, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """3x3 (stride) -> BN -> ReLU -> 3x3 -> BN, plus the input (or its 1x1 projection), then ReLU.
    The same unit in Gluon's BasicBlockV1 and in the non-bottleneck branch of MXNet's resnext symbol."""

    def __init__(self, dim_in: int, dim_out: int, stride: int, project: bool, eps: float):
        super().__init__()
        self.conv1 = _conv3x3(dim_in, dim_out, stride)
        self.bn1 = nn.BatchNorm2d(dim_out, eps=eps)
        self.conv2 = _conv3x3(dim_out, dim_out)
        self.bn2 = nn.BatchNorm2d(dim_out, eps=eps)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module | None = None
        if project:
            self.shortcut = nn.Sequential(
                nn.Conv2d(dim_in, dim_out, 1, stride=stride, bias=False), nn.BatchNorm2d(dim_out, eps=eps)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.shortcut is None else self.shortcut(x)
        return self.relu(out + skip)


def basic_stages(
    dim_in: int, widths: tuple[int, ...] | list[int], depths: tuple[int, ...], eps: float, always_project: bool
) -> tuple[nn.Sequential, int]:
    """Stages of basic blocks, the first of each at stride 2 (1 in the first stage), its shortcut projected
    always or only where the channels change; returns them and their output channels."""
    stages = []
    for i, (depth, width) in enumerate(zip(depths, widths, strict=True)):
        project = always_project or dim_in != width
        blocks = [BasicBlock(dim_in, width, 1 if i == 0 else 2, project=project, eps=eps)]
        blocks += [BasicBlock(width, width, 1, project=False, eps=eps) for _ in range(depth - 1)]
        stages.append(nn.Sequential(*blocks))
        dim_in = width
    return nn.Sequential(*stages), dim_in


class GluonResNetV1(nn.Module):
    """Gluon's ResNetV1 with basic blocks (ResNet-18/34), the ImageNet stem (no thumbnail)."""

    def __init__(self, depths: tuple[int, ...], num_classes: int):
        super().__init__()
        widths = [64 * 2**i for i in range(len(depths))]
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        # Gluon projects the shortcut of a stage's first block only where the channels change.
        self.stages, dim_out = basic_stages(64, widths, depths, eps=1e-5, always_project=False)
        self.fc = nn.Linear(dim_out, num_classes)
        # cifar10_dist.py initializes every weight with mx.init.Xavier() (uniform, magnitude 3): Glorot uniform.
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(images))
        return self.fc(x.mean(dim=(2, 3)))


class GluonVGG(nn.Module):
    """Gluon's VGG without BatchNorm: 3x3 convolutions (with bias) and ReLU, a 2x2 max pool after each stage,
    then 4096 -> 4096 -> classes dense layers with dropout 0.5. The first dense layer reads the last
    feature map flattened: 512 x (image_size / 32)^2 values."""

    def __init__(self, layers: tuple[int, ...], num_classes: int, image_size: int = 32):
        super().__init__()
        if image_size % 32:
            raise ValueError(f"VGG image_size {image_size} must be a multiple of 32 (five 2x2 pools)")
        widths = (64, 128, 256, 512, 512)
        features: list[nn.Module] = []
        dim_in = 3
        for count, width in zip(layers, widths, strict=True):
            for _ in range(count):
                features += [nn.Conv2d(dim_in, width, 3, padding=1), nn.ReLU(inplace=True)]
                dim_in = width
            features.append(nn.MaxPool2d(2, stride=2))
        self.features = nn.Sequential(*features)
        side = image_size // 32
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(512 * side * side, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, num_classes),
        )
        # Gluon's VGG: convolutions Xavier gaussian on fan out, magnitude 2; dense layers normal(0.01); biases 0.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))


class MXNetCifarResNet(nn.Module):
    """MXNet's example resnext symbol for CIFAR with basic units (num_layers = 6n + 2 < 164): n units per
    stage over 16, 32, 64 channels. BatchNorm epsilon 2e-5 as the symbol sets it."""

    def __init__(self, units_per_stage: int, num_classes: int):
        super().__init__()
        eps = 2e-5
        # bn_data: fix_gamma=True holds the scale at 1; only the shift is learned.
        self.data_bn = nn.BatchNorm2d(3, eps=eps)
        self.data_bn.weight.requires_grad_(False)
        self.conv0 = _conv3x3(3, 16)
        # The symbol's first unit of every stage has dim_match=False: a projection even at 16 -> 16.
        self.stages, dim_out = basic_stages(16, (16, 32, 64), (units_per_stage,) * 3, eps=eps, always_project=True)
        self.fc = nn.Linear(dim_out, num_classes)
        # fit.py in MXNet's example/image-classification: Xavier gaussian on fan in, magnitude 2.
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
        nn.init.zeros_(self.fc.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.conv0(self.data_bn(images)))
        return self.fc(x.mean(dim=(2, 3)))


def resnet18_v1(num_classes: int) -> GluonResNetV1:
    return GluonResNetV1((2, 2, 2, 2), num_classes)


def vgg11(num_classes: int, image_size: int = 32) -> GluonVGG:
    return GluonVGG((1, 1, 2, 2, 2), num_classes, image_size)


def cifar_resnext110(num_classes: int) -> MXNetCifarResNet:
    return MXNetCifarResNet((110 - 2) // 6, num_classes)


CIFAR_MODELS = {"resnet18_v1": resnet18_v1, "vgg11": vgg11, "cifar_resnext110": cifar_resnext110}
