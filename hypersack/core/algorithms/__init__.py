"""Search algorithms behind one interface (see ``base``)."""
from hypersack.core.algorithms.base import Algorithm, Decision, Suggestion, register_algorithm
from hypersack.core.algorithms.grid import GridSearch
from hypersack.core.algorithms.random_search import RandomSearch
from hypersack.core.algorithms.optuna_search import OptunaSearch
from hypersack.core.algorithms.tpe import TPESearch
from hypersack.core.algorithms.sha import SuccessiveHalving
from hypersack.core.algorithms.hyperband import Hyperband, hyperband_brackets
from hypersack.core.algorithms.pack_hyperband import PackHyperband
from hypersack.core.algorithms.asha import ASHA
from hypersack.core.algorithms.bohb import BOHB
from hypersack.core.algorithms.rasda import RASDA
from hypersack.core.algorithms.catalog import algorithm_names, make_algorithm

__all__ = ["Algorithm", "Decision", "Suggestion", "GridSearch", "RandomSearch", "TPESearch", "OptunaSearch",
           "make_algorithm", "register_algorithm", "algorithm_names",
           "SuccessiveHalving", "Hyperband", "PackHyperband", "ASHA", "BOHB", "RASDA",
           "hyperband_brackets"]
