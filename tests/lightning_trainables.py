"""Trainables of tests/test_integration_lightning.py (importable by worker processes): a linear
model fitted by Lightning on 64 fixed samples, 16 a batch, on CPU."""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from hypersack.integrations.lightning import HyperSackCallback, pl


class Linear(pl.LightningModule):
    def __init__(self, lr: float):
        super().__init__()
        self.lr = lr
        torch.manual_seed(0)
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, index):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, index):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def loaders() -> tuple[DataLoader, DataLoader]:
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return (DataLoader(TensorDataset(x, y), batch_size=16),
            DataLoader(TensorDataset(x, y), batch_size=64))


def weight_sum(module) -> float:
    return round(float(sum(p.detach().sum() for p in module.parameters())), 6)


class Recorder(pl.Callback):
    """Notes the epoch and the weights each fit starts from, and the weights after each epoch."""

    def __init__(self):
        self.start = None
        self.after = {}

    def on_train_epoch_start(self, trainer, module):
        if self.start is None:
            self.start = (int(trainer.current_epoch), weight_sum(module))

    def on_validation_end(self, trainer, module):
        if not trainer.sanity_checking:
            self.after[int(trainer.current_epoch) + 1] = weight_sum(module)


def train(config, ctx):
    """``config["epochs"]`` epochs; attribute ``fit-<attempt>``: where the fit started (epoch,
    weights), the weights after each epoch, and whether HyperSack stopped it."""
    hypersack_cb, recorder = HyperSackCallback(ctx, monitor="val_loss"), Recorder()
    trainer = pl.Trainer(max_epochs=config["epochs"], callbacks=[hypersack_cb, recorder],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0,
                         accelerator="cpu", devices=1, default_root_dir=str(ctx.trial_dir))
    train_data, val_data = loaders()
    trainer.fit(Linear(config["lr"]), train_data, val_data, ckpt_path=hypersack_cb.ckpt_path)
    start_epoch, start_weights = recorder.start
    ctx.set_attr(f"fit-{ctx.attempt}", {"start_epoch": start_epoch, "start_weights": start_weights,
                                        "stopped": hypersack_cb.stopped,
                                        "after": {str(k): v for k, v in recorder.after.items()},
                                        "last_epoch": int(trainer.current_epoch)})
