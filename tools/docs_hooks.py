"""MkDocs hooks: the reference pages generated from the code, and benchmark tables from their
records, so the site never restates what the repository already says.

A page asks for generated text with a marker line, replaced when the site is built:

- ``<!-- generated: cli -->``: every command of ``hypersack`` with its arguments, from the
  parser itself (``hypersack.cli._parser``);
- ``<!-- generated: study-file -->``: every field of a study file (each section's fields, type,
  default and meaning), from the spec's dataclasses and the comments beside their fields
  (``hypersack/core/spec.py``);
- ``<!-- generated: gpu-results -->``: the newest GPU suite run per device, from
  ``benchmarks/results/gpu-*.json``;
- ``<!-- results: HEADING -->``: the section of ``benchmarks/RESULTS.md`` whose ``##`` heading
  starts with HEADING, verbatim (the record of a measurement, with its command, machine and
  date).

A marker that cannot be filled fails the build (an error naming the page and the marker).
The benchmarks' plots (``benchmarks/results/*.png``) are served as ``benchmarks/plots/NAME``.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- (generated|results): ?(.*?) -->$", re.M)


def on_files(files: Any, config: Any, **_: Any) -> Any:
    from mkdocs.structure.files import File
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.png")):
        files.append(File.generated(config, f"benchmarks/plots/{path.name}",
                                    abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    def fill(match: re.Match[str]) -> str:
        kind, arg = match.group(1), match.group(2).strip()
        try:
            if kind == "results":
                return results_section(arg)
            return GENERATORS[arg]()
        except KeyError as exc:
            raise ValueError(f"{page.file.src_path}: unknown marker {match.group(0)!r}") from exc
    return MARKER.sub(fill, markdown)


# ---- the command line ----------------------------------------------------------------------

def cli_reference() -> str:
    from hypersack.cli import _parser
    parser = _parser()
    out = [f"`{parser.prog}`: {parser.description}.", "", f"{parser.epilog}.", ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        out += [f"## `hypersack {name}`", "", (command.description or "").rstrip(".") + ".", "",
                "```text", command.format_usage().strip().replace("usage: ", ""), "```", "",
                "| argument | meaning |", "|---|---|"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(action.option_strings) or action.dest
            choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices else ""
            default = (f" Default: `{action.default}`." if action.default not in
                       (None, False, argparse.SUPPRESS) else "")
            out.append(f"| `{flags}` | {_cell(action.help or '')}{choices}.{default} |")
        out.append("")
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").rstrip(".")


# ---- the study file --------------------------------------------------------------------------

SECTIONS = (("", "StudySpec"), ("budget", "Budget"), ("executor", "ExecutorOptions"),
            ("resources", "Resources"), ("pack", "PackOptions"))


def study_file_reference() -> str:
    import hypersack.core.spec as spec
    comments = _field_comments(Path(spec.__file__))
    out: list[str] = []
    for section, name in SECTIONS:
        cls = getattr(spec, name, None)
        if cls is None:
            continue
        title = f"`{section}:`" if section else "Top level"
        doc = " ".join((cls.__doc__ or "").split())
        out += [f"## {title}", "", doc, "", "| field | type | default | meaning |", "|---|---|---|---|"]
        for field in dataclasses.fields(cls):
            if field.name.startswith("_"):
                continue
            key = f"{section}.{field.name}" if section else field.name
            out.append(f"| `{key}` | `{str(field.type)}` | {_default(field)} | "
                       f"{_cell(comments.get((name, field.name), ''))} |")
        out.append("")
    return "\n".join(out)


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "see its section"
    return f"`{json.dumps(value) if isinstance(value, (str, int, float, type(None))) else value}`"


def _field_comments(path: Path) -> dict[tuple[str, str], str]:
    """(class, field) -> the comment lines right above the field, or the comment on its line."""
    source = path.read_text()
    lines = source.splitlines()
    found: dict[tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                above, i = [], item.lineno - 2
                while i >= 0 and lines[i].strip().startswith("#"):
                    above.insert(0, lines[i].strip().lstrip("# "))
                    i -= 1
                inline = lines[item.lineno - 1].partition("#")[2].strip()
                found[(node.name, item.target.id)] = " ".join(above) or inline
    return found


# ---- benchmark records -----------------------------------------------------------------------

def gpu_results() -> str:
    runs = sorted((ROOT / "benchmarks" / "results").glob("gpu-*.json"))
    if not runs:
        return "No GPU suite run is recorded yet."
    out = []
    for path in runs:
        data = json.loads(path.read_text())
        out += [f"### {data.get('device_name', path.stem)}, {data.get('date', '')}", "",
                f"`{path.relative_to(ROOT)}`", "", "| # | check | result | seconds | goals |",
                "|---|---|---|---:|---|"]
        for check in data.get("checks") or []:
            goals = "; ".join(f"{k}: {'met' if v.get('met') else 'missed'}" if isinstance(v, dict)
                              else f"{k}: {v}" for k, v in (check.get("goals") or {}).items())
            out.append(f"| {check.get('id', '')} | {check.get('name', '')} | "
                       f"{check.get('status', '')} | {check.get('seconds', '')} |"
                       + (f" {_cell(goals)} |" if goals else " |"))
        for row in ((data.get("check5_partial") or {}).get("engines") or {}).get("rows", []):
            if row is (data["check5_partial"]["engines"]["rows"][0]):
                out += ["", "| check 5 workload | N | mode | model-steps/s | graph captured |",
                        "|---|---:|---|---:|---|"]
            out.append(f"| {row.get('workload')} | {row.get('n')} | {row.get('mode', '')} | "
                       f"{row.get('model_steps_per_s', row.get('error', ''))} | "
                       f"{row.get('graphs', '')} |")
        out.append("")
    return "\n".join(out)


def results_section(heading: str) -> str:
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    start = text.find(f"\n## {heading}")
    if start < 0:
        raise KeyError(heading)
    end = text.find("\n## ", start + 1)
    body = text[start:end if end > 0 else None].strip().split("\n", 1)[1]
    # the record's own headings sit one level below the page's section
    return re.sub(r"^(#{2,5}) ", lambda m: "#" + m.group(1) + " ", body, flags=re.M)


GENERATORS = {"cli": cli_reference, "study-file": study_file_reference,
              "gpu-results": gpu_results}


def glossary() -> str:
    import hypersack
    doc = hypersack.__doc__ or ""
    start = doc.index("Glossary")
    return doc[doc.index("\n", start):].strip()


GENERATORS["glossary"] = glossary
