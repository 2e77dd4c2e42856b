"""The digits fusable tasks: same configs, data, init and shuffling as the plain trainables."""
from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("sklearn") is None:      # its data file is read, sklearn not imported
    pytest.skip("scikit-learn is not installed", allow_module_level=True)

from fusion_helpers import run_members  # noqa: E402

from hypersack.core.packs import fusibility_key  # noqa: E402
from hypersack.errors import ConfigError  # noqa: E402
from hypersack.fusion.task import Member  # noqa: E402
from hypersack.workloads import digits  # noqa: E402
from hypersack.workloads import FUSED_BUILTINS  # noqa: E402
from hypersack.workloads.digits_fused import DIGITS_CNN, DIGITS_MLP  # noqa: E402


def plain_training(config, seed, epochs):
    """The digits trainable's own loop (torch.optim, nn.Module), in float64."""
    x_train, y_train, _, _ = digits.load_digits_split()
    settings = digits.parse_settings(config, epochs)
    torch.manual_seed(seed)
    model = digits.build_mlp(settings.hidden, settings.dropout).double()
    optimizer = digits.build_optimizer(model, settings)
    for epoch in range(1, epochs + 1):
        digits._train_epoch(model, optimizer, x_train.double(), y_train, settings.batch_size,
                            digits._epoch_seed(seed, epoch))
    return model.state_dict()


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd", "rmsprop"])
def test_alone_member_equals_the_plain_digits_trainable(optimizer):
    config = {"lr": 3e-3, "weight_decay": 1e-4, "batch_size": 128, "hidden": 16,
              "optimizer": optimizer, "epochs": 1}
    source, _ = run_members(DIGITS_MLP, [Member(0, config, seed=5)], max_members=1)
    want = plain_training(config, seed=5, epochs=1)
    got = source.checkpoints[0]["model"]
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=1e-9, atol=1e-11)


def test_mlp_pack_learns_and_reports_the_digits_metrics():
    configs = [{"lr": 3e-3, "optimizer": "adam", "batch_size": 64, "hidden": 32, "dropout": 0.1},
               {"lr": 1e-2, "optimizer": "sgd", "batch_size": 32, "hidden": 32, "nesterov": True},
               {"lr": 2e-3, "optimizer": "adamw", "batch_size": 128, "hidden": 32,
                "lr_schedule": "cosine", "warmup_epochs": 1}]
    members = [Member(i, {**c, "epochs": 2}, seed=i) for i, c in enumerate(configs)]
    source, stats = run_members(DIGITS_MLP, members, dtype=torch.float32)
    assert stats.peak_members == 3
    for i in range(3):
        steps = [s for s, _ in source.reports[i]]
        assert steps == [1, 2]
        assert set(source.reports[i][-1][1]) == {"accuracy", "loss", "train_loss"}
    assert source.reports[0][-1][1]["accuracy"] > 0.5


def test_cnn_fuses_on_channels_and_hidden():
    config = {"lr": 3e-3, "batch_size": 128, "hidden": 16, "channels": 4, "epochs": 1}
    members = [Member(0, config, seed=0), Member(1, {**config, "batch_size": 64}, seed=1),
               Member(2, {**config, "channels": 8}, seed=2)]
    source, _ = run_members(DIGITS_CNN, members, dtype=torch.float32)
    assert sorted(source.reports) == [0, 1] and list(source.failures) == [2]
    assert fusibility_key(config, DIGITS_CNN.architecture_keys) == \
        (("channels", 4), ("hidden", 16))


@pytest.mark.parametrize("config, field", [
    ({"optimizer": "lbfgs"}, "config.optimizer"),
    ({"optimizer": "adam", "nesterov": True}, "config.nesterov"),
    ({"lr_schedule": "linear"}, "config.lr_schedule"),
    ({"batch_size": 0}, "config.batch_size"),
    ({"lr": -1}, "config.lr"),
])
def test_invalid_configs_name_the_field(config, field):
    with pytest.raises(ConfigError) as info:
        DIGITS_MLP.optimizer(config, steps_per_epoch=10)
    assert info.value.field == field


def test_builtins_resolve():
    digits_only = {k: v for k, v in FUSED_BUILTINS.items() if k.startswith("digits_")}
    assert digits_only == {"digits_mlp": "hypersack.workloads.digits_fused:DIGITS_MLP",
                              "digits_cnn": "hypersack.workloads.digits_fused:DIGITS_CNN"}
    assert DIGITS_MLP.max_steps({}, 7) == 7 and DIGITS_MLP.max_steps({"epochs": 3}, 7) == 3
