"""YAML text read within limits: the one loader for study, cluster and space YAML.

``parse_yaml(text, source)`` refuses, before building any Python object: NUL and other control
characters, nesting deeper than ``MAX_DEPTH``, documents that aliases expand to more than
``MAX_NODES`` nodes (the "billion laughs") or that refer to themselves. Only plain YAML types
are built (null, bool, int, float, str, date, list, mapping): ``!!python/...``, ``!!set``,
``!!binary`` and other tags are errors. Floats are read as YAML 1.2 writes them as well
(``1e-4``, ``5E3``: PyYAML's YAML 1.1 rule wants a dot), and a key repeated in one mapping is an
error naming both lines. ``read_yaml_text(path)`` reads a file of at most
``MAX_FILE_BYTES`` of UTF-8. Errors are ConfigError with ``location = "source:line"``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from hypersack.errors import ConfigError

__all__ = ["parse_yaml", "dump_yaml", "read_yaml_text", "MAX_FILE_BYTES", "MAX_DEPTH",
           "MAX_NODES"]

#: Largest YAML file read (bytes); study and cluster files are a few kilobytes.
MAX_FILE_BYTES = 1 << 20
#: Deepest nesting of lists and mappings, aliases expanded.
MAX_DEPTH = 64
#: Most nodes (scalars, lists, mappings) a document may hold once its aliases are expanded.
MAX_NODES = 100_000

_TAG = "tag:yaml.org,2002:"
_PLAIN_TAGS = ("null", "bool", "int", "float", "str", "timestamp", "seq", "map")


class _LimitError(yaml.MarkedYAMLError):
    """A limit of the loader, raised at the node that breaks it."""


def _too_deep(mark: Any) -> _LimitError:
    return _LimitError(None, None, f"nests deeper than {MAX_DEPTH} levels", mark)


class _PlainConstructor(yaml.constructor.SafeConstructor):
    """Builds only plain types; a constructor's own failure (``!!float abc``, an int of more
    digits than Python converts) is a ConstructorError at the node."""

    yaml_constructors = {_TAG + t: yaml.SafeLoader.yaml_constructors[_TAG + t] for t in _PLAIN_TAGS}
    yaml_multi_constructors: dict = {}

    def construct_undefined(self, node: yaml.Node) -> Any:
        raise yaml.constructor.ConstructorError(
            None, None, f"has the tag {node.tag!r}; study files hold only plain values "
            "(numbers, strings, booleans, null, dates, lists and mappings)", node.start_mark)

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            _refuse_repeated_keys(node)
        return super().construct_mapping(node, deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, AttributeError, LookupError, ArithmeticError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot be read as {node.tag.removeprefix(_TAG)} ({exc})",
                node.start_mark) from None


_PlainConstructor.add_constructor(None, _PlainConstructor.construct_undefined)

#: YAML 1.2 core-schema floats with an exponent, which PyYAML's YAML 1.1 rule reads as strings
#: (it wants a dot and a signed exponent: ``1e-4``, ``2E10``, ``1.5e3``); the others are its own.
_FLOAT_12 = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")


def _refuse_repeated_keys(node: yaml.MappingNode) -> None:
    """ConstructorError at the second of two equal scalar keys of one mapping (merge keys
    ``<<`` aside: a merged mapping may be overridden on purpose)."""
    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _TAG + "merge":
            continue
        key = (key_node.tag, key_node.value)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the mapping repeats the key {key_node.value!r} (first at line "
                f"{seen[key]}, again at line {line}); keep one", key_node.start_mark)
        seen[key] = line


class _PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
                yaml.composer.Composer, _PlainConstructor, yaml.resolver.Resolver):
    """The pure-Python loader (where libyaml is missing): it composes at most MAX_DEPTH levels."""

    def __init__(self, stream: str):
        yaml.SafeLoader.__init__(self, stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _too_deep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_PyLoader.add_implicit_resolver(_TAG + "float", _FLOAT_12, list("-+.0123456789"))

if yaml.__with_libyaml__:
    class _CLoader(yaml.CSafeLoader, _PlainConstructor):
        """libyaml's parser and composer (3-12x faster, benchmarks/driver/loader_limits.py) with the plain
        constructor; its composer recurses in C, so ``_check_depth`` reads the events first."""
    _CLoader.add_implicit_resolver(_TAG + "float", _FLOAT_12, list("-+.0123456789"))
    _Loader: Any = _CLoader
else:  # pragma: no cover - libyaml is part of PyYAML's wheels
    _Loader = _PyLoader


def _check_depth(text: str) -> None:
    """_LimitError when the YAML events of ``text`` nest deeper than MAX_DEPTH (libyaml path:
    its parser is iterative, its composer is not)."""
    if _Loader is _PyLoader:
        return
    parser = yaml.CSafeLoader(text)
    depth = 0
    try:
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep(event.start_mark)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    finally:
        parser.dispose()


def _is_parser_depth_limit(problem: str) -> bool:
    """Whether ``problem`` is the parser's own nesting limit (libyaml 0.2.6+ in PyYAML 6.0.3+ stops
    at 1,000 levels while scanning ahead, before ``_check_depth`` sees the events): the same limit
    as ours, so it gets our message whichever PyYAML is installed."""
    return "nesting depth" in problem


def _measure(root: yaml.Node) -> None:
    """Raise _LimitError when aliases make ``root`` cyclic, deeper than MAX_DEPTH or larger than
    MAX_NODES once expanded. Shared nodes are measured once (memo), so this is linear in the
    file, and recursion is bounded by the file's own nesting (an alias names an earlier node)."""
    memo: dict[int, tuple[int, int]] = {}      # id(node) -> (expanded size, depth)
    open_: set[int] = set()

    def visit(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in memo:
            return memo[key]
        if key in open_:
            raise _LimitError(None, None, "refers to itself through an alias", node.start_mark)
        open_.add(key)
        size, depth = 1, 1
        children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        for child in children:
            s, d = visit(child)
            size, depth = size + s, max(depth, d + 1)
            if size > MAX_NODES:
                raise _LimitError(None, None, f"expands to more than {MAX_NODES} values "
                                  "(aliases repeated too often)", node.start_mark)
            if depth > MAX_DEPTH:
                raise _LimitError(None, None, f"nests deeper than {MAX_DEPTH} levels once its "
                                  "aliases are expanded", node.start_mark)
        open_.discard(key)
        memo[key] = (size, depth)
        return size, depth

    visit(root)


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper that also quotes strings ``parse_yaml`` reads as floats (``'1e-3'``)."""


_Dumper.add_implicit_resolver(_TAG + "float", _FLOAT_12, list("-+.0123456789"))


def dump_yaml(data: Any) -> str:
    """``data`` as YAML text that ``parse_yaml`` reads back as ``data`` (keys in their order)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


def read_yaml_text(path: Path, what: str) -> str:
    """The file's text: at most MAX_FILE_BYTES of UTF-8 without NUL bytes."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(what, str(path), f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(what, str(path), f"is larger than {MAX_FILE_BYTES} bytes",
                          location=str(path))
    if b"\x00" in raw:
        line = raw[:raw.index(b"\x00")].count(b"\n") + 1
        raise ConfigError(what, f"{path}:{line}", "contains a NUL byte (a binary file?)",
                          location=f"{path}:{line}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(what, f"{path}:{line}", f"is not UTF-8 text (byte {raw[exc.start]:#04x})",
                          location=f"{path}:{line}") from None


def _yaml_error(source: str, line: Any, problem: str) -> ConfigError:
    """A ConfigError read as ``source:line: <problem>`` (``field``: "the YAML", ``value`` and
    ``location``: "source:line"; ``problem`` is a sentence: "the YAML is malformed: ...")."""
    where = f"{source}:{line}"
    error = ConfigError("the YAML", where, problem, location=where)
    error.args = (f"{where}: {problem}",)
    return error


def _tab_problem(text: str, mark: Any) -> str | None:
    """What to say when a parse error's line holds a tab where YAML wants spaces (its
    indentation, or the very place the parser stopped), else None."""
    if mark is None:
        return None
    lines = text.splitlines()
    line = lines[mark.line] if 0 <= mark.line < len(lines) else ""
    indent = line[:len(line) - len(line.lstrip(" \t"))]
    at_mark = mark.column < len(line) and line[mark.column] == "\t"
    if "\t" not in indent and not at_mark:
        return None
    column = (indent.index("\t") if "\t" in indent else mark.column) + 1
    return (f"the YAML has a tab at column {column}: YAML indents with spaces only (replace "
            "the tab with spaces)")


def parse_yaml(text: str, source: str = "<string>") -> tuple[Any, yaml.Node | None]:
    """The data in the YAML ``text`` and its node tree, within the loader's limits; ConfigError
    with ``location = "source:line"`` otherwise (``source`` names the text in messages)."""
    loader = None
    try:
        _check_depth(text)
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            return None, None
        _measure(node)
        return loader.construct_document(node), node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else "?"
        problem = exc.problem or exc.context or "cannot be parsed"
        if _is_parser_depth_limit(problem):
            problem = f"the YAML {_too_deep(mark).problem}"
        elif isinstance(exc, yaml.constructor.ConstructorError):
            problem = problem if problem.startswith("the ") else f"the value {problem}"
        elif isinstance(exc, _LimitError):
            problem = f"the YAML {problem}"
        else:
            problem = _tab_problem(text, mark) or f"the YAML is malformed: {problem}"
        raise _yaml_error(source, line, problem) from None
    except yaml.reader.ReaderError as exc:
        line = text[:exc.position].count("\n") + 1
        raise _yaml_error(source, line, f"the YAML contains the character {chr(exc.character)!r}, "
                          "which YAML does not allow") from None
    finally:
        if loader is not None:
            loader.dispose()
