"""Trainables of tests/test_integration_huggingface.py (importable by worker processes): a linear
model trained by ``transformers.Trainer`` on 64 fixed samples, 16 a batch, on CPU."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from hypersack.integrations.huggingface import HFTrainable, transformers


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, 1)

    def forward(self, x, labels=None):
        out = self.net(x)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


def samples() -> list[dict]:
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return [{"x": a, "labels": b} for a, b in zip(x, y)]


def weight_sum(model) -> float:
    return round(float(sum(p.detach().sum() for p in model.parameters())), 6)


class Recorder(transformers.TrainerCallback):
    """Writes ``fit-<n>.json`` beside ``output_dir`` when training ends: the epoch and weights
    it began from, the weights at each evaluation, and where it ended."""

    def __init__(self):
        self.notes = {"after": {}}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.notes["start"] = [state.global_step, weight_sum(model)]

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        self.notes["after"][str(round(state.epoch))] = weight_sum(model)

    def on_train_end(self, args, state, control, **kwargs):
        self.notes["end"] = state.global_step
        folder = Path(args.output_dir).parent
        n = len(list(folder.glob("fit-*.json"))) + 1
        (folder / f"fit-{n}.json").write_text(json.dumps(self.notes))


def make_trainer(config):
    args = transformers.TrainingArguments(
        output_dir="unused", num_train_epochs=config["epochs"], learning_rate=config["lr"],
        per_device_train_batch_size=16, per_device_eval_batch_size=64, optim="sgd",
        lr_scheduler_type="constant", eval_strategy="epoch", save_strategy="no",
        logging_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True, seed=0)
    data = samples()
    return transformers.Trainer(model=Linear(), args=args, train_dataset=data, eval_dataset=data,
                                callbacks=[Recorder()])


train = HFTrainable(make_trainer)
