"""Study files: YAML read with limits and line numbers, so every error names the file, line and field.

``load_study(path)`` reads, parses and checks a study file once and returns a ``LoadedStudy``: the
``StudySpec`` (its ``source_dir`` the file's folder), the algorithm built from it, the declared
``storage`` and the raw mapping; ``Study.from_yaml`` (so ``hypersack run FILE``) uses it, so
the spec is parsed and the algorithm built once per file. ``load_study_file(path)`` returns just
the validated declaration as a dict (StudySpec.from_dict accepts it). Both raise ConfigError with
``location = "path:line"``. The file is read by
``hypersack.yaml_input`` (size, bytes, nesting, alias and tag limits).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from hypersack.core.algorithms import make_algorithm
from hypersack.core.spec import StudySpec
from hypersack.errors import ConfigError
from hypersack.yaml_input import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, parse_yaml, read_yaml_text

__all__ = ["LoadedStudy", "load_study", "load_study_file", "load_yaml_mapping", "parse_yaml", "MAX_FILE_BYTES", "MAX_DEPTH",
           "MAX_NODES"]


def _key_lines(node: yaml.Node, prefix: str, lines: dict[str, int]) -> None:
    """Record the 1-based line of every mapping key, by dotted path (the first occurrence)."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            lines.setdefault(path, key_node.start_mark.line + 1)
            _key_lines(value_node, path, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.setdefault(f"{prefix}[{i}]", item.start_mark.line + 1)
            _key_lines(item, f"{prefix}[{i}]", lines)


def _line_of(field: str, lines: dict[str, int]) -> int | None:
    """The line of ``field`` or of its nearest enclosing field."""
    parts = field.split(".")
    while parts:
        path = ".".join(parts)
        if path in lines:
            return lines[path]
        parts.pop()
    return None


def load_yaml_mapping(path: str | Path, what: str, shape: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The mapping in the YAML file ``path`` and the 1-based line of each key (dotted paths).
    ConfigError with ``location = "path:line"`` when the file cannot be read, breaks a limit of
    the loader, is malformed, or is not a mapping (``what``: "study file"; ``shape``: what the
    mapping must hold)."""
    path = Path(path)
    data, node = parse_yaml(read_yaml_text(path, what), str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"the {what}", type(data).__name__, f"must be {shape}",
                          location=f"{path}:1")
    lines: dict[str, int] = {}
    _key_lines(node, "", lines)
    return data, lines


@dataclasses.dataclass(frozen=True)
class LoadedStudy:
    """A study file read once: ``spec`` (``source_dir``: ``folder``), ``algorithm`` (built from
    ``spec``, to be used by the first run instead of building it again), ``storage`` (the
    file's ``storage`` field or None), ``data`` (the mapping as read) and ``folder`` (the
    file's folder, absolute)."""
    spec: StudySpec
    algorithm: Any
    storage: str | None
    data: dict[str, Any]
    folder: Path


def load_study(path: str | Path) -> LoadedStudy:
    """The study declared in ``path``, checked as ``run`` would before storing anything: the
    spec, and the algorithm built from it (so a bad option, or a grid too large to list, names
    its line too). The spec is parsed once and the algorithm built once."""
    data, lines = load_yaml_mapping(path, "study file", "a mapping of fields")
    data = _yaml_graphs(data)
    try:
        spec = StudySpec.from_dict(data)
        algorithm = make_algorithm(spec.algorithm, spec.space, spec.objective, spec.seed)
    except ConfigError as exc:
        line = _line_of(exc.field.removeprefix("config."), lines)
        exc.location = f"{path}:{line}" if line else str(path)
        exc.args = (f"{exc.location}: {exc.args[0]}",)
        raise
    folder = Path(path).parent.resolve()
    # The file's folder replaces any source_dir it declares (checked above, as before).
    spec = dataclasses.replace(spec, source_dir=str(folder))
    return LoadedStudy(spec, algorithm, data.get("storage"), data, folder)


def _yaml_graphs(data: dict[str, Any]) -> dict[str, Any]:
    """``pack: {graphs: on}`` unquoted, which YAML 1.1 reads as True (and ``off`` as False),
    means the mode "on" ("off"): the only field whose words YAML turns into booleans."""
    pack = data.get("pack")
    if not isinstance(pack, dict) or not isinstance(pack.get("graphs"), bool):
        return data
    return dict(data, pack=dict(pack, graphs="on" if pack["graphs"] else "off"))


def load_study_file(path: str | Path) -> dict[str, Any]:
    """The study declaration in ``path`` as a dict, checked as ``load_study`` checks it."""
    return load_study(path).data
