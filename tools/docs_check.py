"""The docs site's coverage check (run by ``make docs`` before MkDocs builds the site).

Fails (exit 1, each problem on a line) when:

- a public name has no ``::: path`` entry in a reference page (``docs/reference/*.md``): the
  public names are ``hypersack.__all__`` and the ``__all__`` of each module in ``PUBLIC``;
- a documented name has no docstring;
- a page under ``docs/`` is missing from ``mkdocs.yml``'s nav, or the nav names a missing page
  (MkDocs' strict mode catches broken links and anchors when it builds).

Read statically with griffe (what mkdocstrings renders), so optional extras need not be installed.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import griffe
import yaml

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ("hypersack.algorithms", "hypersack.fusion", "hypersack.placement",
          "hypersack.integrations.lightning", "hypersack.integrations.huggingface",
          "hypersack.integrations.mlflow", "hypersack.integrations.tensorboard",
          "hypersack.integrations.wandb")
ALSO = ("hypersack.runtime.worker.context.TrialContext",)   # ctx: public, not exported by name


def public_names(package: griffe.Module) -> dict[str, str]:
    """Public name -> the path its documentation entry must name (or an equivalent alias)."""
    names = {f"hypersack.{n}": f"{module}.{n}" for n, module in _exports().items()}
    for module in PUBLIC:
        obj = package[module.removeprefix("hypersack.")]
        names.update({f"{module}.{n}": f"{module}.{n}" for n in (obj.exports or [])})
    names.update({p: p for p in ALSO})
    return names


def _exports() -> dict[str, str]:
    """``hypersack.__all__`` is ``sorted(_EXPORTS)``, names loaded lazily from their modules:
    read the dict (name -> module)."""
    source = (ROOT / "hypersack" / "__init__.py").read_text()
    block = source[source.index("_EXPORTS = {"):source.index("}", source.index("_EXPORTS = {"))]
    return dict(re.findall(r'"(\w+)": "([\w.]+)"', block))


def documented() -> set[str]:
    """The paths the reference pages document: each ``::: path``, and for a module entry with
    ``members: [...]`` each ``path.member``, or with no members list every ``path.*``
    (written ``path.*``)."""
    found = set()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        text = page.read_text()
        for match in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", text + "\n", re.M):
            path, options = match.group(1), match.group(2)
            members = re.search(r"members: \[(.*?)\]", options)
            found.add(path)
            if members:
                found.update(f"{path}.{m.strip()}" for m in members.group(1).split(","))
            else:
                found.add(f"{path}.*")
    return found


def _resolve(package: griffe.Module, path: str) -> griffe.Object | griffe.Alias | None:
    try:
        return package[path.removeprefix("hypersack.")]
    except (KeyError, griffe.AliasResolutionError):
        return None


def nav_pages(nav: list) -> set[str]:
    pages: set[str] = set()
    for entry in nav:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            pages |= nav_pages(value) if isinstance(value, list) else {value}
    return pages


def problems() -> list[str]:
    package = griffe.load("hypersack", search_paths=[str(ROOT)], resolve_aliases=True,
                          resolve_external=False)
    entries = documented()
    for path in list(entries):          # an entry counts for the object it names, by any path
        target = None if path.endswith(".*") else _resolve(package, path)
        if target is not None:
            entries.add(target.canonical_path)
    out = []
    for name, where in sorted(public_names(package).items()):
        target = _resolve(package, where)
        # an entry may name the object where it is defined (hypersack.study.Study)
        paths = {name, where} | ({target.canonical_path} if target is not None else set())
        parents = {p.rsplit(".", 1)[0] + ".*" for p in paths}
        if not (paths | parents) & entries:
            out.append(f"undocumented public name: {name} (add '::: {name}' to a docs/reference page)")
        if target is not None and not (target.docstring and target.docstring.value.strip()):
            out.append(f"public name without a docstring: {name}")
        if target is None:
            out.append(f"public name not found: {name}")
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    listed = nav_pages(config["nav"])
    present = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    out += [f"page not in mkdocs.yml's nav: docs/{p}" for p in sorted(present - listed)]
    out += [f"nav names a missing page: docs/{p}" for p in sorted(listed - present)]
    return out


if __name__ == "__main__":
    found = problems()
    for line in found:
        print(line)
    print(f"docs check: {len(found)} problem(s)")
    sys.exit(1 if found else 0)
