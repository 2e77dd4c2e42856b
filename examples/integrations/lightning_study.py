"""A Lightning Trainer in each trial: ASHA over the learning rate of a tiny regression model, on
CPU, in seconds (``pip install 'hypersack[lightning]'``).

    python examples/integrations/lightning_study.py [--trials 6] [--workers 2]

Each trial fits ``LitLinear`` with ``HyperSackCallback``: every validation epoch is reported
(``val_loss``, ``train_loss``) with the Trainer's state as checkpoint; a trial ASHA pauses stops
its Trainer and, when promoted, resumes from that checkpoint (``ckpt_path``).
"""
from __future__ import annotations

import argparse
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import hypersack
from hypersack.integrations.lightning import HyperSackCallback, pl


class LitLinear(pl.LightningModule):
    def __init__(self, lr: float):
        super().__init__()
        self.lr = lr
        self.net = nn.Linear(8, 1)

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


def data(seed: int) -> DataLoader:
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(seed))
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=32)


def train(config, ctx):
    warnings.filterwarnings("ignore")          # Lightning's advice about dataloader workers
    torch.manual_seed(ctx.seed)
    callback = HyperSackCallback(ctx, monitor="val_loss")
    trainer = pl.Trainer(max_epochs=config["epochs"], callbacks=[callback], accelerator="cpu",
                         devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, default_root_dir=str(ctx.trial_dir))
    trainer.fit(LitLinear(config["lr"]), data(0), data(1), ckpt_path=callback.ckpt_path)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--storage", default="hypersack.db")
    args = parser.parse_args(argv)
    study = hypersack.Study(name="lightning-example", storage=args.storage,
                            space={"lr": hypersack.Float(1e-3, 0.1, log=True), "epochs": 4},
                            objective=("val_loss", "min"), n_trials=args.trials,
                            workers=args.workers, max_steps="epochs",
                            algorithm={"type": "asha", "min_t": 1, "max_t": 4, "reduction_factor": 2})
    study.run(train, if_exists="replace")
    best = study.best_trial()
    print(best)
    return best


if __name__ == "__main__":
    main()
