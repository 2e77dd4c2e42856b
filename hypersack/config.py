"""Study files: YAML read with limits and line numbers, so every error names the file, line and field.

``load_study_file(path)`` returns the validated study declaration as a dict (StudySpec.from_dict
accepts it), or raises ConfigError with ``location = "path:line"``. The file is read by
``hypersack.yaml_input`` (size, bytes, nesting, alias and tag limits).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hypersack.core.algorithms import make_algorithm
from hypersack.core.spec import StudySpec
from hypersack.errors import ConfigError
from hypersack.yaml_input import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, parse_yaml, read_yaml_text

__all__ = ["load_study_file", "load_yaml_mapping", "parse_yaml", "MAX_FILE_BYTES", "MAX_DEPTH",
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


def load_study_file(path: str | Path) -> dict[str, Any]:
    """The study declaration in ``path``, checked as ``run`` would before storing anything: the
    spec, and the algorithm built from it (so a bad option, or a grid too large to list, names
    its line too)."""
    data, lines = load_yaml_mapping(path, "study file", "a mapping of fields")
    try:
        spec = StudySpec.from_dict(data)
        make_algorithm(spec.algorithm, spec.space, spec.objective, spec.seed)
    except ConfigError as exc:
        line = _line_of(exc.field.removeprefix("config."), lines)
        exc.location = f"{path}:{line}" if line else str(path)
        exc.args = (f"{exc.location}: {exc.args[0]}",)
        raise
    return data
