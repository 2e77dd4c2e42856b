"""Public search algorithms and multi-fidelity helpers.

Every algorithm is also reachable by name from YAML or Python, e.g.
``algorithm: {type: asha, min_t: 1, max_t: 27, reduction_factor: 3}`` (names: grid, random, tpe,
optuna, sha, hyperband, pack_hyperband, asha, bohb, rasda).

- :func:`hyperband_brackets` (R, eta): the (n_i, r_i) of every Hyperband bracket.
- :func:`rasda_schedule`: RASDA's milestones and device allocations.
- :func:`scaled_lr`, :func:`warmup_factor`, :func:`lr_scale`: learning-rate scaling for
  data-parallel trials (linear for SGD, square root for Adam, linear warm-up).
"""
from hypersack.core.algorithms import (ASHA, BOHB, RASDA, Algorithm, Decision, GridSearch,
                                       Hyperband, PackHyperband, RandomSearch, Suggestion,
                                       SuccessiveHalving, TPESearch, OptunaSearch, algorithm_names,
                                       hyperband_brackets,
                                       make_algorithm, register_algorithm)
from hypersack.core.algorithms.rasda import (lr_rule, lr_scale, rasda_schedule, scaled_lr,
                                             warmup_factor)

__all__ = ["Algorithm", "Decision", "Suggestion", "GridSearch", "RandomSearch", "TPESearch",
           "OptunaSearch", "SuccessiveHalving", "Hyperband", "PackHyperband", "ASHA", "BOHB", "RASDA",
           "hyperband_brackets",
           "rasda_schedule", "scaled_lr", "warmup_factor", "lr_scale", "lr_rule",
           "make_algorithm", "register_algorithm", "algorithm_names"]
