"""A Hugging Face Trainer in each trial, from a Trainer factory (``run_hf_search``, Optuna's
``hyperparameter_search`` in one call): ASHA over the learning rate of a tiny model on CPU, in
seconds (``pip install 'hypersack[huggingface]'``).

    python examples/integrations/huggingface_study.py [--trials 6] [--workers 2]

``make_trainer(config)`` builds the Trainer; HyperSack points its ``output_dir`` into the
trial's folder, reports each epoch's evaluation (``eval_loss``) with the saved checkpoint, stops
training when ASHA pauses the trial and resumes it from that checkpoint when promoted.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn

import hypersack
from hypersack.integrations.huggingface import run_hf_search, transformers


class Regressor(nn.Module):
    """Any module whose forward returns ``{"loss": ...}`` trains in a Trainer."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x, labels=None):
        out = self.net(x)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


def samples(seed: int) -> list[dict]:
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(seed))
    return [{"x": a, "labels": a.sum().reshape(1)} for a in x]


def make_trainer(config):
    args = transformers.TrainingArguments(
        output_dir="hf-out", num_train_epochs=config["epochs"], learning_rate=config["lr"],
        per_device_train_batch_size=32, optim="sgd", lr_scheduler_type="constant",
        eval_strategy="epoch", save_strategy="no", logging_strategy="no", report_to="none",
        use_cpu=True, disable_tqdm=True, seed=0)
    return transformers.Trainer(model=Regressor(), args=args, train_dataset=samples(0),
                                eval_dataset=samples(1))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--storage", default="hypersack.db")
    args = parser.parse_args(argv)
    study = run_hf_search(make_trainer, {"lr": hypersack.Float(1e-3, 0.1, log=True), "epochs": 4},
                          objective=("eval_loss", "min"), n_trials=args.trials,
                          name="huggingface-example", storage=args.storage, workers=args.workers,
                          max_steps="epochs", if_exists="replace",
                          algorithm={"type": "asha", "min_t": 1, "max_t": 4, "reduction_factor": 2})
    best = study.best_trial()
    print(best)
    return best


if __name__ == "__main__":
    main()
