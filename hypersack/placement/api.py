"""Placement by policy name: ``assign``/``place``, the policy registry and user policies.

A policy is a function ``policy(jobs, cluster, **options) -> {job_id: devices}`` where devices is
``(node_id, gpu_id)`` or a tuple of them; it must not place a job that does not fit (Eq. 1-4 on
top of the cluster's load) and may leave any job out. ``assign`` validates the inputs, runs the
policy and, for a policy that is not built in, checks its answer with ``check_placement``.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, Hashable, Mapping, Sequence

from hypersack.placement.auto import auto
from hypersack.placement.check import check_job_list, check_placement
from hypersack.placement.cluster import Cluster, as_devices
from hypersack.placement.fill import fill
from hypersack.placement.improve import worst_fit_decreasing_local_search
from hypersack.placement.lagrange import lagrange
from hypersack.placement.model import Job
from hypersack.placement.live import POLICIES, check_options
from hypersack.placement.load import InJobOrder
from hypersack.placement.policies import BUILTIN
from hypersack.errors import ConfigError

__all__ = ["assign", "place", "register_policy", "unregister_policy", "policy_names", "get_policy",
           "parse_placement", "Policy"]

Policy = Callable[..., Mapping[Hashable, Any]]
_ID = attrgetter("id")


def _mip(jobs: Sequence[Job], cluster: Cluster, **options: Any) -> Mapping[Hashable, Any]:
    from hypersack.placement.mip import mip
    return mip(jobs, cluster, **options)


_TRUSTED: dict[str, Policy] = {**{k: BUILTIN[k] for k in ("ff", "ffd", "wf", "wfd", "exclusive")},
                               "wfd-ls": worst_fit_decreasing_local_search, "mip": _mip,
                               "hay": BUILTIN["hay"], "ray": BUILTIN["ray"], "fill": fill,
                               "lagrange": lagrange, "auto": auto}
_POLICIES: dict[str, Policy] = dict(_TRUSTED)


def policy_names() -> tuple[str, ...]:
    """The registered policy names: the built-ins first, then user policies in registration order."""
    return tuple(_POLICIES)


def register_policy(name: str, fn: Policy, *, replace: bool = False) -> None:
    """Make ``fn`` available as ``policy=name``. A built-in name, or a taken one without
    ``replace=True``, raises ConfigError."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("placement", name, "must be a non-empty policy name")
    if not callable(fn):
        raise ConfigError(f"placement.{name}", fn, "must be a function (jobs, cluster, **options)")
    if name in _TRUSTED:
        raise ConfigError("placement", name, "is a built-in policy and cannot be replaced")
    if name in _POLICIES and not replace:
        raise ConfigError("placement", name, "is already registered (pass replace=True)")
    _POLICIES[name] = fn


def unregister_policy(name: str) -> None:
    """Forget a user policy (built-ins stay)."""
    if name in _TRUSTED or name not in _POLICIES:
        raise ConfigError("placement", name, "must name a registered user policy")
    del _POLICIES[name]


def parse_placement(value: Any, field: str = "placement") -> tuple[str, dict[str, Any]]:
    """The study YAML's ``placement``: a policy name (``wfd``) or a mapping ``{policy: hay,
    w_frag: 1, w_entire: 2}``; returns (name, options), options checked for the built-ins."""
    if isinstance(value, Mapping):
        options = dict(value)
        name = options.pop("policy", None)
        if not isinstance(name, str) or name not in _POLICIES:
            raise ConfigError(f"{field}.policy", name, f"must be one of {', '.join(_POLICIES)}")
    else:
        name, options = value, {}
        if not isinstance(name, str) or name not in _POLICIES:
            raise ConfigError(field, name, f"must be a policy name ({', '.join(_POLICIES)}) or "
                              "a mapping {policy: NAME, OPTION: VALUE}")
    if name in POLICIES:
        try:
            check_options(name, options)
        except ConfigError as exc:
            raise ConfigError(exc.field.replace("placement", field, 1), exc.value, exc.problem) from None
    return name, options


def get_policy(policy: str | Policy) -> Policy:
    """The function behind a policy name (a callable is returned as it is)."""
    if callable(policy):
        return policy
    if isinstance(policy, str) and policy in _POLICIES:
        return _POLICIES[policy]
    raise ConfigError("placement", policy, f"must be one of {', '.join(_POLICIES)}")


def _check_jobs(jobs: Any, cluster: Cluster) -> list[Job]:
    if not isinstance(cluster, Cluster):
        raise ConfigError("cluster", cluster, "must be a Cluster")
    return check_job_list(jobs, cluster.running)


def assign(jobs: Sequence[Job], cluster: Cluster, policy: str | Policy = "wfd", *,
           check: bool | None = None, **options: Any) -> dict[Hashable, tuple]:
    """Place ``jobs`` on what ``cluster`` has left: ``{job_id: ((node_id, gpu_id), ...)}`` with
    ``job.gpus`` distinct devices per placed job; jobs that do not fit now are absent.

    ``policy``: a registered name (``policy_names()``) or a function; ``options`` go to it (e.g.
    ``time_limit=5`` for ``mip``). ``check``: verify Eq. 1-4 on the answer (default: only for
    policies that are not built in). The cluster is not changed; apply the answer with
    ``cluster.with_jobs(jobs, answer)``.
    """
    jobs = _check_jobs(jobs, cluster)
    fn = get_policy(policy)
    raw = fn(jobs, cluster, **options)
    trusted = isinstance(policy, str) and policy in _TRUSTED
    if not trusted:                                  # built-ins already answer in this form
        raw = {jid: as_devices(devices) for jid, devices in raw.items()}
    elif type(raw) is InJobOrder:                    # a built-in's answer in the given order
        answer = dict(raw)
        if check:
            check_placement(jobs, cluster, answer)
        return answer
    order = list(filter(raw.__contains__, map(_ID, jobs)))     # the placed jobs in the given order
    if len(order) != len(raw):
        answer = dict(raw)                           # names unknown jobs: the check reports it
    elif order == list(raw):
        answer = dict(raw)                           # already in the given order
    else:
        answer = {jid: raw[jid] for jid in order}
    if check or (check is None and not trusted):
        check_placement(jobs, cluster, answer)
    return answer


def place(jobs: Sequence[Job], cluster: Cluster, policy: str | Policy = "wfd", *,
          check: bool | None = None, **options: Any) -> dict[Hashable, tuple]:
    """``assign`` for single-GPU jobs: ``{job_id: (node_id, gpu_id)}``. A job asking for more
    than one GPU raises ConfigError (use ``assign``)."""
    jobs = list(jobs) if not isinstance(jobs, (str, bytes, Mapping)) and hasattr(jobs, "__iter__") else jobs
    for i, job in enumerate(jobs if isinstance(jobs, list) else []):
        if isinstance(job, Job) and job.gpus != 1:
            raise ConfigError(f"jobs[{i}].gpus", job.gpus, "must be 1 for place(); use assign()")
    answer = assign(jobs, cluster, policy, check=check, **options)
    return {jid: devices[0] for jid, devices in answer.items()}
