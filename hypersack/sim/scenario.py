"""Simulation scenarios: a YAML file naming a cluster, a study, a workload and its models.

Schema (every error is a ConfigError naming the dotted field)::

    name: sp1-4xa100                 # required
    description: free text
    seed: 0                          # seeds the study (configs) and the curve noise
    cluster: {...}                   # the placement cluster YAML form (Cluster.from_dict)
    policy: wfd                      # placement of a plain run (default wfd), or {policy: hay, w_frag: 1}
    study:                           # a study spec without name/trainable: space, objective,
      space: {...}                   #   algorithm, budget, max_steps (int or config key; default
      objective: {metric: accuracy, mode: max}     # the algorithm's max_t), max_retries,
      execution: fused               #   execution and pack (fused packs, see sim.packs),
      pack: {max_members: 16}        #   trial_timeout_s (a trial running longer fails)
      algorithm: {type: grid}
      budget: {trials: 96}
      time_sharing: {policy: hermes}  # optional: devices time-shared among trials (Hermes)
    workload:
      model_key: model | model: resnet18           # config key naming the model, or a fixed model
      batch_size_key: batch_size | batch_size: 64
      architecture_keys: [hidden]    # config keys that change tensor shapes (fused packs)
      profiles: [{model, batch_size, arch, step_time_s, utilization, memory_gb, cpus, gpus}, ...]
      source: "where the profiles come from (measured / estimated)"
      validated: false               # whether the profiles were measured on that hardware
    perf: {interference, saturation: {A100: 2.0}, dp_beta, startup_s, fused, ...}   # perf.PerfParams
    curves: {type: parametric, ...} | {type: replay, file: curves/digits_mlp.json}
          | {type: function, function: hypersack.sim.functions:hartmann6, options: {...}}
          | {type: table, file: curves.csv, step_column: step}   # see sim.curves
    events:                          # inventory changes at simulated times (seconds)
      - {at: 600, fail: {node: a0, gpu: "1"}}
      - {at: 900, add: {node: a1, cpus: 64, gpu: {id: "0", arch: H100, memory_gb: 80}}}
    compare:                         # what `hypersack simulate --compare` runs
      policies: [exclusive, ff, ffd, wf, wfd]
      algorithms: {ASHA: {type: asha, ...}, RASDA: {type: rasda, ...}}
      time_sharing: [fifo, rr, slaq, hermes]   # time-sharing policies (the first: the baseline)
      seeds: 10                      # each algorithm run with seeds seed .. seed+9: the quality table
      budget_steps: 3000             # fidelity steps each run is cut at (default: the fewest run)
    reference: {source: "...", ...}  # the paper's figures, printed beside ours (free form)
    notes: free text printed with the results
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


from hypersack.core.spec import StudySpec, check_fields
from hypersack.errors import ConfigError
from hypersack.sim.curves import CurveModel, curves_from_dict
from hypersack.sim.executor import DeviceChange
from hypersack.sim.packs import SimFusion
from hypersack.sim.perf import ANY, PerfModel, PerfParams, ProfileTable, WorkloadKeys
from hypersack.validation import check_integer, check_number

__all__ = ["Scenario", "load_scenario", "scenario_from_dict"]

_TOP = {"name", "description", "seed", "cluster", "policy", "study", "workload", "perf", "curves",
        "events", "compare", "reference", "notes"}
_STUDY = {"space", "objective", "algorithm", "budget", "max_steps", "max_retries", "execution",
          "pack", "trial_timeout_s", "time_sharing"}
_WORKLOAD = {"model_key", "model", "batch_size_key", "batch_size", "profiles", "source", "validated",
             "architecture_keys"}
_COMPARE = {"policies", "algorithms", "time_sharing", "seeds", "budget_steps"}


@dataclass
class Scenario:
    name: str
    description: str
    seed: int
    cluster: Any
    policy: Any                      # a policy name or {policy: NAME, OPTION: VALUE}
    study: StudySpec
    max_retries: int                 # study.max_retries: the same as study.executor.max_retries
    perf: PerfModel
    curves: CurveModel
    changes: list[DeviceChange]
    compare_policies: list[str]
    compare_algorithms: dict[str, dict[str, Any]]
    compare_time_sharing: list[str]
    profiles_source: str
    profiles_validated: bool
    compare_seeds: int = 1
    compare_budget_steps: int | None = None
    reference: dict[str, Any] = field(default_factory=dict)
    notes: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    base_dir: Path = Path(".")

    def with_algorithm(self, algorithm: Mapping[str, Any]) -> "Scenario":
        """A copy whose study uses ``algorithm`` (validated like the scenario's own)."""
        raw = dict(self.raw)
        raw["study"] = {**raw["study"], "algorithm": dict(algorithm)}
        return scenario_from_dict(raw, self.base_dir)

    @property
    def compares_quality(self) -> bool:
        """Whether ``--compare`` prints the search-quality table (``sim.quality``) of its
        algorithms: with function or table curves, or when ``compare.seeds`` or
        ``compare.budget_steps`` is given."""
        return bool(self.compare_algorithms) and (
            self.raw.get("curves", {}).get("type") in ("function", "table")
            or "seeds" in (self.raw.get("compare") or {})
            or "budget_steps" in (self.raw.get("compare") or {}))

    def with_seed(self, seed: int) -> "Scenario":
        """A copy with ``seed`` (the study's configs and the curves' noise)."""
        return scenario_from_dict({**self.raw, "seed": seed}, self.base_dir)

    def with_time_sharing(self, policy: str) -> "Scenario":
        """A copy whose devices are time-shared under ``policy``: the scenario's own options
        when it already uses that policy, else the policy's defaults (``max_jobs_per_device``
        kept), as the Hermes paper runs its baselines."""
        raw = dict(self.raw)
        options = dict(raw["study"].get("time_sharing") or {})
        if options.get("policy") != policy:
            options = {"policy": policy, **({"max_jobs_per_device": options["max_jobs_per_device"]}
                                            if "max_jobs_per_device" in options else {})}
        raw["study"] = {**raw["study"], "time_sharing": options}
        return scenario_from_dict(raw, self.base_dir)

    def with_execution(self, execution: str) -> "Scenario":
        """A copy whose study runs with ``execution`` (separate | fused | auto)."""
        raw = dict(self.raw)
        raw["study"] = {**raw["study"], "execution": execution}
        return scenario_from_dict(raw, self.base_dir)


def load_scenario(path: str | Path) -> Scenario:
    """The scenario in a YAML file, read with the study loader's limits (size, depth, aliases)."""
    from hypersack.config import load_yaml_mapping
    path = Path(path)
    data, _ = load_yaml_mapping(path, "scenario file", "a mapping (name, cluster, study, ...)")
    return scenario_from_dict(data, path.parent)


def scenario_from_dict(d: Any, base_dir: Path = Path(".")) -> Scenario:
    _check_keys("", d, _TOP)
    for required in ("name", "cluster", "study", "workload", "curves"):
        if required not in d:
            raise ConfigError(required, None, "is required")
    seed = d.get("seed", 0)
    check_integer("seed", seed, low=0)
    from hypersack.sim._placement import check_policy, cluster_from_dict
    cluster = cluster_from_dict(d["cluster"])   # its errors already name cluster.<field>
    policy = check_policy(d.get("policy", "wfd"), "policy")
    study, max_retries = _study(d["name"], d["study"], seed)
    changes = _events(d.get("events") or [])
    _check_added_nodes(changes, cluster)
    added = [c.gpu.arch for c in changes if c.gpu is not None]
    perf, keys = _perf(d["workload"], d.get("perf"), study, list(cluster.architectures) + added)
    curves = _prefixed("curves", lambda: curves_from_dict(d["curves"], base_dir=base_dir, seed=seed,
                                                          model_key=keys.model_key,
                                                          batch_size_key=keys.batch_size_key,
                                                          objective_metric=study.objective.metrics[0],
                                                          config_keys=list(study.space)),
                       already="curves")
    compare = d.get("compare") or {}
    _check_keys("compare", compare, _COMPARE)
    policies = list(compare.get("policies") or [])
    for i, p in enumerate(policies):
        check_policy(p, f"compare.policies[{i}]")
    algorithms = compare.get("algorithms") or {}
    if not isinstance(algorithms, Mapping) or not all(isinstance(v, Mapping) and "type" in v
                                                      for v in algorithms.values()):
        raise ConfigError("compare.algorithms", algorithms, "must map a label to an algorithm {type: ...}")
    for label, spec in algorithms.items():
        _prefixed(f"compare.algorithms.{label}", lambda: _build_algorithm(study, spec))
    sharing = _time_sharing_policies(compare.get("time_sharing"))
    seeds = compare.get("seeds", 1)
    check_integer("compare.seeds", seeds, low=1, high=10_000)
    budget_steps = compare.get("budget_steps")
    if budget_steps is not None:
        check_integer("compare.budget_steps", budget_steps, low=1)
    scenario = Scenario(
        name=str(d["name"]), description=str(d.get("description", "")), seed=seed, cluster=cluster,
        policy=policy, study=study, max_retries=max_retries, perf=perf, curves=curves,
        changes=changes, compare_policies=policies,
        compare_algorithms={str(k): dict(v) for k, v in algorithms.items()},
        compare_time_sharing=sharing, compare_seeds=int(seeds), compare_budget_steps=budget_steps,
        profiles_source=str(d["workload"].get("source", "not stated")),
        profiles_validated=bool(d["workload"].get("validated", False)),
        reference=dict(d.get("reference") or {}), notes=str(d.get("notes", "")), raw=dict(d),
        base_dir=base_dir)
    if scenario.compares_quality:
        study.objective.part(curves.metric, "curves.metric")   # its regret needs the mode
    return scenario


# ---- sections -----------------------------------------------------------------------------

def _study(name: Any, d: Any, seed: int) -> tuple[StudySpec, int]:
    _check_keys("study", d, _STUDY)
    retries = d.get("max_retries", 2)
    check_integer("study.max_retries", retries, low=0)
    # study.max_retries and study.trial_timeout_s are the spec's executor fields, written flat
    # (a scenario has no executor section): the simulator runs what the spec says.
    spec_dict = {k: v for k, v in d.items() if k not in ("max_retries", "trial_timeout_s")}
    spec_dict.update(name=name, seed=seed)
    spec_dict["executor"] = {"max_retries": retries}
    if d.get("trial_timeout_s") is not None:
        spec_dict["executor"]["trial_timeout_s"] = d["trial_timeout_s"]
    spec = _prefixed("study", lambda: StudySpec.from_dict(spec_dict))
    if spec.max_steps is None:
        max_t = spec.algorithm.get("max_t")
        if max_t is None:
            raise ConfigError("study.max_steps", None,
                              "is required (steps per trial) unless the algorithm sets max_t")
        spec = _prefixed("study", lambda: StudySpec.from_dict({**spec_dict, "max_steps": max_t}))
    _prefixed("study", lambda: _build_algorithm(spec, spec.algorithm))
    return spec, spec.executor.max_retries


def _perf(workload: Any, perf: Any, study: StudySpec, archs: list[str]) -> tuple[PerfModel, WorkloadKeys]:
    _check_keys("workload", workload, _WORKLOAD)
    for key in ("model_key", "batch_size_key"):
        value = workload.get(key)
        if value is not None and value not in study.space:
            raise ConfigError(f"workload.{key}", value, "must name a parameter of study.space")
    keys = WorkloadKeys(workload.get("model_key"), str(workload.get("model", ANY)),
                        workload.get("batch_size_key"), workload.get("batch_size", ANY))
    table = ProfileTable.from_list(workload.get("profiles"), "workload.profiles")
    params = PerfParams.from_dict(perf)
    archs = list(dict.fromkeys(archs))
    if not archs:
        raise ConfigError("cluster.nodes", [], "must hold at least one GPU")
    model = PerfModel(table, keys, params, archs, steps_for=study.steps_for,
                      fusion=_fusion(workload, study, params))
    _check_coverage(model, study, archs)
    return model, keys


def _fusion(workload: Mapping[str, Any], study: StudySpec,
            params: PerfParams) -> SimFusion | None:
    """The study's fusion plan (None: ``execution: separate``); in ``auto``, fused or separate
    as ``SimFusion.decide`` says from the scenario's speeds."""
    keys = workload.get("architecture_keys") or []
    if not isinstance(keys, list) or not all(isinstance(k, str) and k in study.space for k in keys):
        raise ConfigError("workload.architecture_keys", keys,
                          f"must be a list of parameters of study.space ({', '.join(study.space)})")
    if study.execution == "separate":
        return None
    fusion = SimFusion(study.execution, study.pack.max_members, tuple(keys))
    if study.execution == "auto":
        fusion.decide(params.fused_model, study.budget.trials)
    return fusion


def _check_coverage(model: PerfModel, study: StudySpec, archs: list[str]) -> None:
    """Every (model, batch size) the space can produce has a profile on every architecture."""
    models = _choices(study, model.keys.model_key, model.keys.model)
    batches = _choices(study, model.keys.batch_size_key, model.keys.batch_size)
    for m in models:
        for b in batches:
            for arch in archs:
                if model.table.lookup(str(m), b, arch) is None:
                    raise ConfigError("workload.profiles", {"model": m, "batch_size": b, "arch": arch},
                                      "has no row for this combination the study can produce")


def _choices(study: StudySpec, key: str | None, fixed: Any) -> list[Any]:
    if key is None:
        return [fixed]
    domain = study.space[key] if key in study.space else None
    for attr in ("choices", "values"):
        values = getattr(domain, attr, None)
        if values:
            return list(values)
    if domain is not None and hasattr(domain, "value"):
        return [domain.value]
    return [ANY]


def _events(events: Any) -> list[DeviceChange]:
    if not isinstance(events, list):
        raise ConfigError("events", events, "must be a list of {at, fail: {...}} or {at, add: {...}}")
    out = []
    for i, e in enumerate(events):
        where = f"events[{i}]"
        _check_keys(where, e, {"at", "fail", "add"})
        at = e.get("at")
        check_number(f"{where}.at", at, low=0.0, hint="(a time in seconds)")
        if ("fail" in e) == ("add" in e):
            raise ConfigError(where, e, "must have exactly one of 'fail' or 'add'")
        out.append(_fail(e["fail"], float(at), where) if "fail" in e else _add(e["add"], float(at), where))
    return out


def _check_added_nodes(changes: list[DeviceChange], cluster: Any) -> None:
    """GPUs may join existing nodes only: DeviceAdded carries no node description, so the
    controller's inventory cannot grow a node it has never seen."""
    known = {str(n.id) for n in cluster.nodes}
    for i, change in enumerate(changes):
        if change.gpu is not None and change.node not in known:
            raise ConfigError(f"events[{i}].add.node", change.node,
                              f"must name a node of the cluster ({', '.join(sorted(known))}): "
                              "new nodes cannot join a running study yet")


def _fail(d: Any, at: float, where: str) -> DeviceChange:
    _check_keys(f"{where}.fail", d, {"node", "gpu"})
    for key in ("node", "gpu"):
        if key not in d:
            raise ConfigError(f"{where}.fail.{key}", None, "is required")
    return DeviceChange(at, str(d["node"]), gpu_id=str(d["gpu"]))


def _add(d: Any, at: float, where: str) -> DeviceChange:
    from hypersack.placement import GPU
    _check_keys(f"{where}.add", d, {"node", "cpus", "gpu"})
    if "node" not in d or not isinstance(d.get("gpu"), Mapping):
        raise ConfigError(f"{where}.add", d, "must have a node and a gpu {id, arch, memory_gb}")
    g = d["gpu"]
    _check_keys(f"{where}.add.gpu", g, {"id", "arch", "memory_gb", "compute", "oversubscription"})
    gpu = _prefixed(f"{where}.add", lambda: GPU(str(g.get("id", "0")), g.get("arch"), g.get("memory_gb"),
                                                 g.get("compute", 100.0), g.get("oversubscription", 1.0)))
    return DeviceChange(at, str(d["node"]), gpu=gpu, cpus=float(d.get("cpus", 0)))


# ---- helpers ------------------------------------------------------------------------------

def _build_algorithm(spec: StudySpec, algorithm: Mapping[str, Any]) -> Any:
    """Build (and drop) the algorithm once, so its options are checked when the scenario loads."""
    from hypersack.core.algorithms import make_algorithm
    return make_algorithm(dict(algorithm), spec.space, spec.objective, seed=spec.seed)


def _check_keys(section: str, given: Any, allowed: set[str]) -> None:
    check_fields(section, given, allowed, root="scenario")


def _prefixed(prefix: str, build: Any, already: str | None = None) -> Any:
    """Run ``build``; a ConfigError it raises gets its field prefixed with ``prefix``."""
    try:
        return build()
    except ConfigError as exc:
        if already and exc.field.startswith(already):
            raise
        raise ConfigError(f"{prefix}.{exc.field}", exc.value, exc.problem) from None


def _time_sharing_policies(value: Any) -> list[str]:
    """``compare.time_sharing``: a list of distinct time-sharing policies (``core.timesharing``)."""
    from hypersack.core.timesharing import POLICIES
    if value is None:
        return []
    if not isinstance(value, list) or not value:
        raise ConfigError("compare.time_sharing", value,
                          f"must be a list of time-sharing policies ({', '.join(POLICIES)})")
    for i, policy in enumerate(value):
        if policy not in POLICIES or value.index(policy) != i:
            raise ConfigError(f"compare.time_sharing[{i}]", policy,
                              f"must be one of {', '.join(POLICIES)}, each listed once")
    return [str(p) for p in value]
