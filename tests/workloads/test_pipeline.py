"""The ``data: pipeline`` input path: uint8 host data, CPU augmentation, DataLoader workers."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_digits import FakeChannel, make_ctx  # noqa: E402

from hypersack.core.demand import loader_workers, trial_cpus  # noqa: E402
from hypersack.errors import ConfigError  # noqa: E402
from hypersack.workloads import lm, pipeline, vision  # noqa: E402

IMAGES = {"train_size": 24, "val_size": 8, "image_size": 8, "batch_size": 8, "width": 2,
          "data": "pipeline", "cpus": 1}


def test_images_are_uint8_fixed_and_cifar_shaped():
    a, la = pipeline.uint8_images(16, 8, 3, 10, seed=0)
    b, lb = pipeline.uint8_images(16, 8, 3, 10, seed=0)
    assert a.dtype == np.uint8 and a.shape == (16, 8, 8, 3) and la.dtype == np.int64
    assert np.array_equal(a, b) and np.array_equal(la, lb)
    assert not np.array_equal(a, pipeline.uint8_images(16, 8, 3, 10, seed=1)[0])


def test_npy_cache_is_written_once_and_read_back(tmp_path):
    first = pipeline.image_arrays(12, 8, 3, 10, 0, str(tmp_path))
    assert len(list(tmp_path.glob("images-*.npy"))) == 1
    pipeline._ARRAYS.clear()
    again = pipeline.image_arrays(12, 8, 3, 10, 0, str(tmp_path))
    assert isinstance(again[0], np.memmap) and np.array_equal(first[0], again[0])


def _window(image, out):
    """(top, left, flipped) of ``out`` as a window of the zero-padded ``image``, or None."""
    padded = np.pad(image, ((4, 4), (4, 4), (0, 0)))
    for flipped, candidate in ((False, out), (True, out[:, ::-1])):
        for top in range(9):
            for left in range(9):
                if np.array_equal(padded[top:top + 8, left:left + 8], candidate):
                    return top, left, flipped
    return None


def test_augmentation_crops_with_padding_and_flips():
    image = np.arange(1, 8 * 8 * 3 + 1, dtype=np.uint8).reshape(8, 8, 3)   # no symmetry
    windows = [_window(image, pipeline.AugmentedImages._augmented(image, np.random.default_rng(s)))
               for s in range(40)]
    assert None not in windows
    assert {w[2] for w in windows} == {False, True}                # flipped about half the time
    assert len({w[:2] for w in windows}) > 10                      # offsets in [0, 8] x [0, 8]


def test_dataset_normalises_and_validation_is_not_augmented():
    images, labels = pipeline.uint8_images(4, 8, 3, 10, seed=0)
    val = pipeline.AugmentedImages(images, labels, augment=False)
    x, y = val[2]
    assert x.shape == (3, 8, 8) and x.dtype == torch.float32 and y == labels[2]
    expected = (images[2, :, :, 0] / 255.0 - pipeline.CIFAR_MEAN[0]) / pipeline.CIFAR_STD[0]
    assert np.allclose(x[0].numpy(), expected, atol=1e-5)
    train = pipeline.AugmentedImages(images, labels, augment=True, seed=5)
    assert torch.equal(train[1][0], train[1][0])              # seeded by (seed, index)
    outs = {tuple(pipeline.AugmentedImages(images, labels, True, s)[1][0].flatten().tolist())
            for s in range(6)}
    assert len(outs) > 1                                         # the seed changes the crop


@pytest.mark.parametrize("config, workers", [({}, 0), ({"data": "pipeline"}, 2),
                                             ({"data": "pipeline", "cpus": 1}, 0),
                                             ({"data": "pipeline", "cpus": 5}, 4)])
def test_loader_workers_come_from_the_trials_cpus(config, workers):
    assert loader_workers(config) == workers
    assert trial_cpus(config) == workers + 1
    images, labels = pipeline.uint8_images(4, 8, 3, 10, seed=0)
    loader = pipeline.make_loader(pipeline.AugmentedImages(images, labels, True), config, 2,
                                  shuffle=True, seed=1, device="cpu")
    assert loader.num_workers == workers


@pytest.mark.parametrize("config, field", [({"data": "disk"}, "config.data"),
                                           ({"data": "pipeline", "cpus": 0}, "config.cpus"),
                                           ({"cpus": 1.5}, "config.cpus")])
def test_bad_data_or_cpus_name_the_field(config, field):
    with pytest.raises(ConfigError) as info:
        trial_cpus(config)
    assert info.value.field == field


def _epoch_batches(config, seed):
    dataset, _, _ = pipeline.pipeline_data(vision.RESNET18_WORKLOAD.with_defaults(config),
                                           "images", None)
    dataset.set_seed(seed)
    loader = pipeline.make_loader(dataset, config, 8, shuffle=True, seed=seed, device="cpu")
    return [b for b in loader]


def test_an_epoch_is_the_same_whatever_the_number_of_workers():
    alone = _epoch_batches(IMAGES, seed=11)
    helped = _epoch_batches({**IMAGES, "cpus": 3}, seed=11)
    assert len(alone) == 3
    for (xa, ya), (xb, yb) in zip(alone, helped):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    other = _epoch_batches(IMAGES, seed=12)
    assert not torch.equal(alone[0][0], other[0][0])


@pytest.mark.parametrize("train, config", [
    (vision.train_resnet18, IMAGES),
    (vision.train_mobilenet, {**IMAGES, "cpus": 2}),
    (lm.train_gpt, {"train_size": 16, "val_size": 4, "seq_len": 6, "vocab": 32, "width": 8,
                    "layers": 1, "heads": 2, "batch_size": 8, "data": "pipeline", "cpus": 1}),
])
def test_trainables_run_and_repeat_through_the_pipeline(train, config, tmp_path):
    runs = []
    for name in ("a", "b"):
        channel = FakeChannel()
        train({**config, "epochs": 2}, make_ctx(tmp_path / name, channel))
        runs.append(channel.reports)
    assert [s for s, _ in runs[0]] == [1, 2]
    assert runs[0][-1][1]["steps"] == 2 * -(-config["train_size"] // 8)
    assert runs[0][-1][1] == pytest.approx(runs[1][-1][1])     # deterministic given the seed


def test_pipeline_trains_differently_from_synthetic(tmp_path):
    synthetic_run, piped = FakeChannel(), FakeChannel()
    plain = {k: v for k, v in IMAGES.items() if k not in ("data", "cpus")}
    vision.train_resnet18({**plain, "epochs": 1}, make_ctx(tmp_path / "s", synthetic_run))
    vision.train_resnet18({**IMAGES, "epochs": 1}, make_ctx(tmp_path / "p", piped))
    assert synthetic_run.reports[-1][1]["train_loss"] != piped.reports[-1][1]["train_loss"]


def test_cifar_classifier_trains_the_model_its_config_names(tmp_path):
    from hypersack.runtime.worker.trainable import resolve_reference
    train = resolve_reference("cifar_classifier")
    reports = {}
    for model in ("resnet18_cifar", "mobilenet_v3_small"):
        channel = FakeChannel()
        train({**IMAGES, "model": model, "epochs": 1}, make_ctx(tmp_path / model, channel))
        reports[model] = channel.reports[-1][1]["train_loss"]
    assert reports["resnet18_cifar"] != reports["mobilenet_v3_small"]
    with pytest.raises(ConfigError) as info:
        train({**IMAGES, "model": "vgg"}, make_ctx(tmp_path / "x", FakeChannel()))
    assert info.value.field == "config.model"


def test_a_fused_task_refuses_pipeline_configs():
    """Packs train on device-resident synthetic data: a ``data: pipeline`` member is refused
    (``execution: auto`` then runs it as a plain trial), never silently trained on other data."""
    from hypersack.runtime.worker.pack import task_accepts
    task = vision.RESNET18
    assert task_accepts(task, {"batch_size": 8})
    assert not task_accepts(task, {"batch_size": 8, "data": "pipeline"})
    with pytest.raises(ConfigError) as info:
        task.batch_size({"data": "pipeline"})
    assert info.value.field == "config.data"
