"""Cost of TPE's suggest() as a study grows (TPE replays every finished trial into a fresh
Optuna study per suggestion, so that a resumed study proposes exactly what the original would).

    python benchmarks/tpe_suggest_cost.py [--trials 400]
Prints the cumulative and per-suggest time at every 100 trials. Needs the [tpe] extra.
"""
from __future__ import annotations

import argparse
import time

from hypersack.core.algorithms.tpe import TPESearch
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=400)
    args = parser.parse_args()
    space = SearchSpace({"x": {"type": "float", "low": -5, "high": 5},
                         "y": {"type": "float", "low": 1e-4, "high": 1, "log": True},
                         "c": [1, 2, 3]})
    tpe = TPESearch(space, Objective("v", "min"), seed=0)
    start = last = time.perf_counter()
    print("trials  total_s  ms_per_suggest_in_last_100")
    for i in range(args.trials):
        config = tpe.suggest(i).config
        tpe.on_complete(i, (config["x"] - 1) ** 2, "complete")
        if (i + 1) % 100 == 0:
            now = time.perf_counter()
            print(f"{i + 1:6d}  {now - start:7.2f}  {(now - last) * 10:8.1f}")
            last = now


if __name__ == "__main__":
    main()
