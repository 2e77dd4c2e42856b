"""HyperSack: hyperparameter optimization that packs many deep-learning trials onto each GPU."""
from hypersack.core.algorithms import Algorithm, Decision, Suggestion, register_algorithm
from hypersack.core.objective import Objective
from hypersack.core.space import Categorical, Constant, Float, Int, SearchSpace
from hypersack.errors import (ConfigError, HyperSackError, MissingDependencyError, SpaceError,
                              StorageError, StudyNotFoundError, TrainableError, TrialStopped)
from hypersack.study import Study

__version__ = "0.1.0"

__all__ = ["Study", "SearchSpace", "Float", "Int", "Categorical", "Constant", "Objective",
           "Algorithm", "Decision", "Suggestion", "register_algorithm", "HyperSackError",
           "ConfigError", "SpaceError", "StorageError", "StudyNotFoundError", "TrainableError",
           "MissingDependencyError", "TrialStopped"]
