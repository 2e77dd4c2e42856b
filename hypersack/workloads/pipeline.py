"""A realistic input pipeline for the GPU workloads (``data: pipeline``): host data, CPU work.

The synthetic mode (``data: synthetic``, the default) keeps every sample on the device, so the
GPU never waits. A real study does not: its images sit in host memory as uint8, and a
``torch.utils.data.DataLoader`` with ``num_workers`` processes decodes, augments and collates each
batch on the CPU while the GPU trains on the previous one; a lightweight model then leaves the
GPU idle between batches (the HyperSack paper's 22-50% utilisation), which is what co-location
fills. This module is that pipeline:

- images: CIFAR-10-shaped uint8 ``[N, H, W, C]`` arrays (smooth class prototypes plus noise,
  clipped to 0-255) drawn once from ``DATA_SEED``, the same on every machine, no download; kept in host memory
  per process, or in ``<data_dir>/<name>.npy`` when the config sets ``data_dir`` (written once,
  then memory-mapped: loader workers share the pages);
- augmentation (training only): random crop with zero padding 4, horizontal flip with probability
  1/2, then normalisation with the CIFAR-10 channel means and deviations, per sample in the loader
  workers; validation images are only normalised;
- tokens (the language model): int64 sequences in host memory, batched by the loader (no
  augmentation; the cost is the host-to-device copy);
- ``num_workers`` = ``core.demand.loader_workers(config)`` (the trial's ``cpus`` - 1), the same
  cores placement counts against the node.

Deterministic given the trial seed whatever ``num_workers`` is: the epoch's shuffle comes from a
generator seeded with the epoch seed, and each sample's crop and flip from a numpy generator
seeded with ``(epoch seed, sample index)``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from hypersack.core.demand import loader_workers
from hypersack.validation import check_integer, check_name

__all__ = ["CIFAR_MEAN", "CIFAR_STD", "PAD", "uint8_images", "image_arrays", "AugmentedImages",
           "TokenSequences", "make_loader", "normalise", "pipeline_data", "train_epoch_loader"]

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
PAD = 4                      # random-crop padding (pixels)


def uint8_images(n: int, size: int, channels: int, classes: int,
                 seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 [n, size, size, channels], labels int64 [n])``: each image is its class's
    prototype plus Gaussian noise of deviation 40, clipped to 0-255. A prototype is smooth, like
    a photograph and unlike pixel noise, so a crop shifted by a few pixels or a mirror image is
    still its class: a colour (each channel uniform in 60-195) plus a 4 x 4 pattern (deviation
    30) scaled up to the image."""
    rng = np.random.default_rng(seed)
    colours = rng.uniform(60, 195, size=(classes, 1, 1, channels))
    cells = -(-size // 4)
    pattern = rng.normal(0, 30, size=(classes, 4, 4, channels))
    pattern = pattern.repeat(cells, axis=1).repeat(cells, axis=2)[:, :size, :size]
    prototypes = colours + pattern
    labels = rng.integers(0, classes, size=n)
    images = np.empty((n, size, size, channels), dtype=np.uint8)
    for start in range(0, n, 4096):       # bounded temporaries for large n
        stop = min(n, start + 4096)
        noisy = prototypes[labels[start:stop]] + rng.normal(0, 40, size=(stop - start, size, size,
                                                                          channels))
        images[start:stop] = np.clip(np.rint(noisy), 0, 255)
    return images, labels.astype(np.int64)


_ARRAYS: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def image_arrays(n: int, size: int, channels: int, classes: int, seed: int,
                 data_dir: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``uint8_images``, generated once per process; with ``data_dir``, once per directory
    (``images-<key>.npy`` and ``labels-<key>.npy``, memory-mapped on later loads)."""
    key = (n, size, channels, classes, seed, data_dir)
    if key in _ARRAYS:
        return _ARRAYS[key]
    if data_dir is None:
        arrays = uint8_images(n, size, channels, classes, seed)
    else:
        arrays = _cached_on_disk(Path(data_dir), n, size, channels, classes, seed)
    _ARRAYS.clear()                      # one data set per process is the usual case
    _ARRAYS[key] = arrays
    return arrays


def _cached_on_disk(folder: Path, n: int, size: int, channels: int, classes: int,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    name = f"{n}-{size}-{channels}-{classes}-{seed}"
    images_path, labels_path = folder / f"images-{name}.npy", folder / f"labels-{name}.npy"
    if not (images_path.exists() and labels_path.exists()):
        folder.mkdir(parents=True, exist_ok=True)
        images, labels = uint8_images(n, size, channels, classes, seed)
        for path, array in ((images_path, images), (labels_path, labels)):
            partial = path.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(partial, array)
            os.replace(partial, path)     # concurrent trials: last writer wins, same bytes
    return np.load(images_path, mmap_mode="r"), np.load(labels_path)


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., H, W, C]`` to float32 ``[..., C, H, W]`` normalised per channel."""
    x = images.to(torch.float32).div_(255.0).movedim(-1, -3)
    channels = x.shape[-3]
    mean = torch.tensor(CIFAR_MEAN[:channels] if channels <= 3 else [0.5] * channels)
    std = torch.tensor(CIFAR_STD[:channels] if channels <= 3 else [0.25] * channels)
    return (x - mean.view(-1, 1, 1)) / std.view(-1, 1, 1)


class AugmentedImages(Dataset):
    """uint8 images ``[N, H, W, C]`` with labels; ``augment``: random crop (padding ``PAD``) and
    flip per sample, seeded by ``(seed, index)``; call ``set_seed`` before each epoch."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, augment: bool, seed: int = 0):
        self.images, self.labels, self.augment, self.seed = images, labels, augment, seed

    def set_seed(self, seed: int) -> None:
        self.seed = seed

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = np.asarray(self.images[index])
        if self.augment:
            image = self._augmented(image, np.random.default_rng((self.seed, int(index))))
        return normalise(torch.from_numpy(np.ascontiguousarray(image))), int(self.labels[index])

    @staticmethod
    def _augmented(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        height, width = image.shape[:2]
        padded = np.pad(image, ((PAD, PAD), (PAD, PAD), (0, 0)))
        top, left = rng.integers(0, 2 * PAD + 1, size=2)
        crop = padded[top:top + height, left:left + width]
        return crop[:, ::-1] if rng.random() < 0.5 else crop


class TokenSequences(Dataset):
    """Token sequences ``x, y`` (int64 ``[N, T]``) served one row at a time."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def set_seed(self, seed: int) -> None:   # nothing random per sample
        pass

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def make_loader(dataset: Dataset, config: Mapping[str, Any], batch_size: int, *, shuffle: bool,
                seed: int, device: str) -> DataLoader:
    """A DataLoader over ``dataset`` with ``loader_workers(config)`` worker processes; the
    shuffle order comes from a generator seeded with ``seed`` (one loader per epoch)."""
    workers = loader_workers(config)
    generator = torch.Generator().manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator,
                      num_workers=workers, pin_memory=str(device).startswith("cuda"),
                      drop_last=False, persistent_workers=False,
                      prefetch_factor=2 if workers else None)


def pipeline_data(config: Mapping[str, Any], kind: str, host_data: Any,
                  data_seed: int = 0) -> tuple[Dataset, torch.Tensor, torch.Tensor]:
    """``(training dataset, x_val, y_val)`` for a workload of ``kind`` ("images" or "tokens"):
    validation comes as CPU tensors (images normalised, not augmented). ``host_data``: the
    workload's ``(x_train, y_train, x_val, y_val)`` for tokens (images are generated here as
    uint8 from ``data_seed``)."""
    if kind == "tokens":
        x, y, x_val, y_val = host_data
        return TokenSequences(x, y), x_val, y_val
    n_train, n_val = _count(config, "train_size", 4096), _count(config, "val_size", 256)
    data_dir = config.get("data_dir")
    if data_dir is not None:
        check_name("config.data_dir", data_dir, max_len=4096)
    images, labels = image_arrays(n_train + n_val, _count(config, "image_size", 32),
                                  _count(config, "channels", 3), _count(config, "classes", 10),
                                  data_seed, data_dir)
    x_val = normalise(torch.from_numpy(np.ascontiguousarray(images[n_train:])))
    return (AugmentedImages(images[:n_train], labels[:n_train], augment=True), x_val,
            torch.from_numpy(np.asarray(labels[n_train:])))


def _count(config: Mapping[str, Any], key: str, default: int) -> int:
    return int(check_integer(f"config.{key}", config.get(key, default), low=1))


def train_epoch_loader(model: torch.nn.Module, optimizer: torch.optim.Optimizer, dataset: Any,
                       config: Mapping[str, Any], batch_size: int, seed: int, loss_fn: Any,
                       device: str, world: Any = None, profiler: Any = None,
                       amp: Any = None) -> tuple[float, int]:
    """One epoch through the DataLoader (shuffle and augmentation seeded by ``seed``); returns
    (mean batch loss, steps). The Profiler's data time is the wait for the next batch and its
    copy to the device. With a ``world`` of size k, each step loads ``batch_size`` x k samples
    and this rank trains on its slice (as ``synthetic.train_epoch``, ``amp`` too)."""
    from hypersack.fusion.precision import PlainPrecision
    from hypersack.runtime.devices.profiler import NullProfiler
    profiler = profiler if profiler is not None else NullProfiler()
    amp = amp if amp is not None else PlainPrecision("fp32", device)
    rank, size = (world.rank, world.size) if world is not None else (0, 1)
    dataset.set_seed(seed)
    loader = make_loader(dataset, config, batch_size * size, shuffle=True, seed=seed,
                         device=device)
    batches = iter(loader)
    model.train()
    losses = []
    for _ in range(len(loader)):
        with profiler.iteration():
            batch = next(batches)
            inputs, targets = (torch.tensor_split(t, size)[rank].to(device, non_blocking=True)
                               for t in batch)
            profiler.data_loaded()
            optimizer.zero_grad(set_to_none=True)
            with amp.autocast():
                if len(targets):
                    loss = loss_fn(model(amp.inputs(inputs)), targets).mean()
                else:   # a short last batch left this rank nothing: join the all-reduce with 0
                    loss = model(amp.inputs(batch[0][:1].to(device))).sum() * 0.0
            amp.step(loss, model, optimizer)
        losses.append(loss.detach())
    return torch.stack(losses).mean().item(), len(losses)
