"""Every Optuna sampler behind `type: optuna`: incremental model, exact resume, errors, and
proposals computed off the loop's thread with the same values."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from hypersack.core.algorithms import OptunaSearch, make_algorithm
from hypersack.core.algorithms.optuna_model import OptunaModel, SamplerSpec, parse_sampler
from hypersack.core.objective import Objective
from hypersack.core.space import SearchSpace
from hypersack.errors import ConfigError

optuna = pytest.importorskip("optuna")

OBJ = Objective("loss", "min")
SPACE = SearchSpace({"x": {"type": "float", "low": -5.0, "high": 5.0},
                     "y": {"type": "float", "low": 1e-3, "high": 1.0, "log": True},
                     "n": {"type": "int", "low": 1, "high": 8}, "epochs": 3})
SAMPLERS = {"tpe": ("TPESampler", {"n_startup_trials": 4}),
            "random": ("RandomSampler", {}),
            "cmaes": ("CmaEsSampler", {"n_startup_trials": 2, "popsize": 4}),
            "qmc": ("QMCSampler", {}),
            "gp": ("GPSampler", {"n_startup_trials": 2, "deterministic_objective": True})}


def loss(config):
    return (config["x"] - 1.0) ** 2 + abs(config["y"] - 0.1) + 0.1 * config["n"]


def search(name, seed=3):
    sampler, options = SAMPLERS[name]
    return OptunaSearch(SPACE, OBJ, seed=seed, sampler=sampler, options=options)


def drive(alg, trials, *, kill_at=None, rebuild=None, parallel=2):
    """Proposals with ``parallel`` trials in flight, finished oldest first (trial 5 fails);
    at ``kill_at`` proposals the state goes through JSON into ``rebuild()``."""
    configs, running = [], []
    for t in range(trials):
        if t == kill_at:
            state = json.loads(json.dumps(alg.state_dict()))
            alg = rebuild()
            alg.load_state_dict(state)
        suggestion = None
        while suggestion is None:              # a deferred proposal: ask again
            suggestion = alg.suggest(t)
        configs.append(suggestion.config)
        running.append(t)
        if len(running) == parallel:
            done = running.pop(0)
            value = None if done == 5 else loss(configs[done])
            alg.on_complete(done, value, "failed" if value is None else "complete")
    return configs, alg


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "gp" else n
                                  for n in sorted(SAMPLERS)])
def test_resume_proposes_exactly_what_the_uninterrupted_study_would(name):
    n, kill = (5, 3) if name == "gp" else (16, 9)       # GP fits take seconds on a shared CPU
    whole, _ = drive(search(name), n)
    resumed, alg = drive(search(name), n, kill_at=kill, rebuild=lambda: search(name))
    assert resumed == whole
    for config in whole:
        SPACE.validate(config)
    assert len({c["x"] for c in whole}) == n          # proposals, not one point repeated
    assert drive(search(name, seed=4), kill + 1)[0] != whole[:kill + 1]


@pytest.mark.parametrize("name", ["tpe", "cmaes", "random"])
def test_a_kept_sampler_reseeded_proposes_what_a_fresh_one_per_trial_would(name, monkeypatch):
    """The kept (REUSED) sampler's caches are pure functions of the study: equal to building
    the sampler afresh with the trial's seed, which is what a resumed model does."""
    kept, _ = drive(search(name), 14)
    monkeypatch.setattr(OptunaModel, "__init__", _fresh_init(OptunaModel.__init__))
    fresh, _ = drive(search(name), 14)
    assert fresh == kept


def _fresh_init(init):
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._reused = False
    return wrapped


def test_the_model_learns_from_the_results():
    alg = OptunaSearch(SearchSpace({"x": {"type": "float", "low": -10.0, "high": 10.0}}), OBJ,
                       seed=1, sampler="tpe", options={"n_startup_trials": 8})
    xs = []
    for t in range(40):
        x = alg.suggest(t).config["x"]
        xs.append(abs(x - 2.0))
        alg.on_complete(t, (x - 2.0) ** 2, "complete")
    assert sum(xs[-15:]) / 15 < 0.5 * sum(xs[:8]) / 8


def test_the_study_holds_each_trial_once_in_proposal_order():
    alg = search("tpe")
    for t in range(6):
        alg.suggest(t)
    for t in (3, 0, 5):
        alg.on_complete(t, float(t), "complete")
    trials = alg.model.trials()
    assert [e["t"] for e in trials] == list(range(6))
    assert [e["s"] for e in trials] == ["C", "R", "R", "C", "R", "C"]
    assert alg.model._study.trials[3].value == 3.0       # told incrementally, not replayed


# ---- proposals off the loop's thread ---------------------------------------------------------

class ManualRunner:
    """Runs a submitted job only when ``release()`` is called: the ask is 'still computing'."""

    def __init__(self):
        self.jobs = []

    def submit(self, fn):
        future = _Manual(fn)
        self.jobs.append(future)
        return future

    def release(self):
        for job in self.jobs:
            job.run()


class _Manual:
    def __init__(self, fn):
        self.fn, self.finished, self.value = fn, False, None

    def run(self):
        if not self.finished:
            self.value, self.finished = self.fn(), True

    def done(self):
        return self.finished

    def result(self, timeout=None):
        if not self.finished:
            if timeout is not None:
                raise TimeoutError
            self.run()
        return self.value


def test_a_deferred_proposal_sees_exactly_the_results_before_it_was_asked_for():
    inline, deferred = search("tpe"), search("tpe")
    for alg in (inline, deferred):
        for t in range(6):
            alg.suggest(t)
        for t in range(5):
            alg.on_complete(t, float(t), "complete")
    runner = ManualRunner()
    deferred.use_background(runner)
    expected = inline.suggest(6).config              # trial 5 still runs: the cut-off
    assert deferred.suggest(6) is None               # computing; the loop goes on
    deferred.on_complete(5, 0.0, "complete")          # arrives meanwhile: queued, not seen
    state = json.loads(json.dumps(deferred.state_dict()))
    assert state["model"]["inflight"] == 6 and state["model"]["queue"]
    runner.release()
    assert deferred.suggest(6).config == expected
    inline.on_complete(5, 0.0, "complete")
    following = inline.suggest(7).config
    deferred.use_background(None)                     # inline again
    assert deferred.suggest(7).config == following
    # Killed while it computed: the resumed model recomputes the same proposal, then applies
    # the queued result, and goes on exactly as the uninterrupted one.
    resumed = search("tpe")
    resumed.load_state_dict(state)
    assert resumed.suggest(6).config == expected
    assert resumed.suggest(7).config == following


def test_with_none_of_its_trials_running_the_proposal_is_waited_for():
    alg = search("tpe")
    alg.use_background(ManualRunner())
    assert alg.suggest(0) is not None      # nothing else runs: None would end the study


def test_a_thread_pool_gives_the_same_proposals_as_inline():
    inline, _ = drive(search("tpe"), 14, parallel=3)
    alg = search("tpe")
    with ThreadPoolExecutor(max_workers=1) as pool:
        alg.use_background(pool, wait_s=0.0)
        threaded, _ = drive(alg, 14, parallel=3)
    assert threaded == inline


# ---- naming samplers and their options -------------------------------------------------------

def test_samplers_by_class_name_short_name_mapping_or_object():
    a = make_algorithm({"type": "optuna", "sampler": "QMCSampler"}, SPACE, OBJ, seed=2)
    b = make_algorithm({"type": "optuna", "sampler": "qmc"}, SPACE, OBJ, seed=2)
    c = make_algorithm({"type": "optuna", "sampler": {"type": "QMC", "options": {}}}, SPACE, OBJ, seed=2)
    configs = [[alg.suggest(t).config for t in range(3)] for alg in (a, b, c)]
    assert configs[0] == configs[1] == configs[2]
    obj = make_algorithm(optuna.samplers.RandomSampler(seed=1), SPACE, OBJ)
    assert isinstance(obj, OptunaSearch) and obj.sampler.instance is not None
    assert isinstance(make_algorithm("optuna", SPACE, OBJ).model._sampler, optuna.samplers.TPESampler)


@pytest.mark.parametrize("spec, field, value", [
    ({"sampler": "NoSuchSampler"}, "algorithm.sampler", "NoSuchSampler"),
    ({"sampler": 3}, "algorithm.sampler", 3),
    ({"sampler": "TPESampler", "options": {"n_startup": 3}}, "algorithm.options", {"n_startup": 3}),
    ({"sampler": "GPSampler", "options": {"seed": 1}}, "algorithm.options.seed", 1),
    ({"sampler": "TPESampler", "options": [1]}, "algorithm.options", [1]),
    ({"sampler": {"type": "CmaEsSampler", "options": {"lr_adapt": True, "with_margin": True}}},
     "algorithm.sampler.options", {"lr_adapt": True, "with_margin": True}),
    ({"sampler": {"name": "tpe"}}, "algorithm.sampler", {"name": "tpe"}),
    ({"sampler": "tpe", "bogus": 1}, "algorithm.bogus", 1),   # the option and the valid ones
])
def test_bad_sampler_names_and_options_name_the_field(spec, field, value):
    with pytest.raises(ConfigError) as exc:
        make_algorithm({"type": "optuna", **spec}, SPACE, OBJ)
    assert exc.value.field == field
    if value is not None:
        assert exc.value.value == value
    assert "TPESampler" in str(exc.value) or field != "algorithm.sampler" or value != "NoSuchSampler"


def test_the_sampler_list_is_optunas():
    with pytest.raises(ConfigError) as exc:
        parse_sampler("nope").resolve(optuna)
    for name in ("TPESampler", "GPSampler", "CmaEsSampler", "QMCSampler", "RandomSampler"):
        assert name in str(exc.value)
    assert SamplerSpec("gp").resolve(optuna) is optuna.samplers.GPSampler


# ---- the documented exception: a sampler object -----------------------------------------------

def test_a_sampler_object_resumes_its_results_but_not_its_random_state():
    """Documented in optuna_model: an object's random state lives in the object, so after a
    resume (a new object, same seed) the proposals differ; every result is restored."""
    def alg():
        return make_algorithm(optuna.samplers.RandomSampler(seed=7), SPACE, OBJ, seed=3)
    whole, original = drive(alg(), 12)
    resumed, rebuilt = drive(alg(), 12, kill_at=6, rebuild=alg)
    assert resumed[:6] == whole[:6]
    assert resumed[6:] != whole[6:]
    assert resumed[6:] == whole[:6]          # the new object's random state started over
    assert [e["s"] for e in rebuilt.model.trials()][:6] == [e["s"] for e in original.model.trials()][:6]


def test_delta_batches_appended_entries_and_stores_a_changed_one_alone():
    """``delta``: entries appended since the previous call are one part (``b<first>``); an
    entry changed after it was stored is its own part; the parts, laid in the order written
    (``journal_entries``), load the model's state."""
    from hypersack.core.algorithms.optuna_model import journal_entries
    model = OptunaModel(SamplerSpec("RandomSampler"), SPACE, "minimize", 0, "t")
    stored: dict = {}

    def commit() -> dict:
        head, parts = model.delta("j.")
        stored.update(json.loads(json.dumps(parts)))
        batches = {int(k[3:]): v for k, v in stored.items() if k.startswith("j.b")}
        singles = {int(k[2:]): v for k, v in stored.items() if k[2].isdigit()}
        again = OptunaModel(SamplerSpec("RandomSampler"), SPACE, "minimize", 0, "t")
        again.load_state_dict({**head, "entries": journal_entries(batches, singles)})
        assert again.state_dict()["trials"] == model.state_dict()["trials"]
        return parts

    model.propose(0)
    model.propose(1)
    model.observe({"x": 0.0, "y": 0.5, "n": 2}, 3.0)
    assert sorted(commit()) == ["j.b0"]                    # three entries, one part
    model.finish(0, 1.5, "complete")                      # entry 0 changes
    model.propose(2)
    assert sorted(commit()) == ["j.0", "j.b3"]
    model.finish(1, 2.5, "complete")
    assert sorted(commit()) == ["j.1"]
    head, parts = model.delta("j.")
    assert parts == {} and model.delta("j.") == (head, {})     # nothing changed: same head
    model.observe({"x": 1.0, "y": 0.5, "n": 2}, 2.0)
    assert sorted(commit()) == ["j.b4"]
    assert model.delta("j.")[0]["n"] == 5


@pytest.mark.parametrize("name", ["tpe", "cmaes"])
def test_the_models_storage_proposes_what_optunas_own_would(name, monkeypatch):
    """The model's study keeps the trials it adds as given (no deep copy); its proposals over
    the same results equal those of a study on Optuna's InMemoryStorage, and the added
    trials are the ones made for it."""
    from hypersack.core.algorithms import optuna_model

    def run() -> tuple[list, OptunaModel]:
        sampler, options = SAMPLERS[name]
        model = OptunaModel(SamplerSpec(sampler, options), SPACE, "minimize", 4, "t")
        got = []
        for t in range(12):
            config = model.propose(t, keep=False)
            got.append(config)
            model.observe(config, loss(config), None if t % 3 else 2)
        return got, model

    fast, model = run()
    storage = model._study._storage
    assert type(storage).__name__ == "JournalStorage"
    added = storage.get_all_trials(model._study._study_id, deepcopy=False)
    assert added and all(t.distributions is not model._dists for t in added)
    monkeypatch.setattr(optuna_model, "_journal_storage",
                        lambda optuna: optuna.storages.InMemoryStorage())
    plain, other = run()
    assert type(other._study._storage) is optuna.storages.InMemoryStorage
    assert fast == plain


def test_the_models_storage_falls_back_to_optunas_where_its_internals_differ(monkeypatch):
    from hypersack.core.algorithms import optuna_model

    class Bare(optuna.storages.InMemoryStorage):
        def __init__(self) -> None:
            super().__init__()
            del self._max_trial_id

    monkeypatch.setattr(optuna.storages, "InMemoryStorage", Bare)
    assert type(optuna_model._journal_storage(optuna)) is Bare
