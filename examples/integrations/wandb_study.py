"""Every trial as a Weights & Biases run, offline (no network, no login): ``pip install
'hypersack[wandb]'``.

    python examples/integrations/wandb_study.py [--dir wandb-runs]
    wandb sync wandb-runs/wandb/offline-run-*        # later, to upload them (needs wandb login)

One run per trial in the group ``wandb-example``: its config, ``loss`` by step, and the end state
(``hypersack.state`` in the summary, a tag). ``WandbCallback(mode="online")`` logs live instead.
"""
from __future__ import annotations

import argparse

import hypersack
from hypersack.integrations.wandb import WandbCallback


def train(config, ctx):
    for step in range(1, 5):
        ctx.report(step, loss=(config["lr"] - 0.01) ** 2 + 1 / step)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--dir", default="wandb-runs", help="the folder W&B writes under")
    parser.add_argument("--storage", default="hypersack.db")
    args = parser.parse_args(argv)
    study = hypersack.Study(name="wandb-example", storage=args.storage,
                            space={"lr": hypersack.Float(1e-3, 0.1, log=True)},
                            objective=("loss", "min"), n_trials=args.trials, workers=1,
                            callbacks=[WandbCallback(dir=args.dir)])
    study.run(train, if_exists="replace")
    best = study.best_trial()
    print(best)
    return best


if __name__ == "__main__":
    main()
