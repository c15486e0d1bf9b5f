"""The floors of the house, read from the import statements of every in-tree source file (its AST, so
imports inside functions count too): the core (``rlloom``) imports no other rlloom distribution; a kit
(``kits/<name>``) imports the core and other kits, no two kits each other (directly or round a
cycle); a plugin (``backends/``, ``algorithms/``, ``plugins/``) imports
the core and kits, never another plugin. A ``"module:attribute"`` string a plugin registers is not an
import and is not checked."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

def distributions() -> dict[str, str]:
    """Top-level module name -> the folder of the distribution that holds it (``core``, ``kits/enginekit``, …)."""
    owners = {}
    for src in [ROOT / "core" / "src", *sorted(ROOT.glob("*/*/src"))]:
        for package in src.iterdir():
            if (package / "__init__.py").exists():
                owners[package.name] = src.parent.relative_to(ROOT).as_posix()
    return owners


def imported_modules(path: pathlib.Path) -> set[str]:
    """The absolute module names ``path`` imports (``import a.b`` and ``from a.b import c`` give ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def import_edges() -> set[tuple[str, str]]:
    """(importing distribution, imported distribution) for every import across two in-tree distributions."""
    owners = distributions()
    edges = set()
    for module, folder in owners.items():
        for path in (ROOT / folder / "src" / module).rglob("*.py"):
            for name in imported_modules(path):
                target = owners.get(name.split(".")[0])
                if target is not None and target != folder:
                    edges.add((folder, target))
    return edges


def floor(folder: str) -> str:
    return "core" if folder == "core" else "kit" if folder.startswith("kits/") else "plugin"


def test_the_scan_sees_every_floor():
    owners = distributions()
    assert owners["rlloom"] == "core" and owners["rlloom_algokit"] == "kits/algokit"
    assert owners["rlloom_grpo"] == "algorithms/grpo" and owners["rlloom_tasks"] == "plugins/tasks"
    assert ("algorithms/dapo", "kits/algokit") in import_edges()  # what the rules below read


def test_no_import_runs_back_up_or_across_plugins():
    allowed = {"core": set(), "kit": {"core", "kit"}, "plugin": {"core", "kit"}}
    wrong = sorted(f"{source} imports {target}" for source, target in import_edges()
                   if floor(target) not in allowed[floor(source)])
    assert wrong == []


def test_the_kits_import_each_other_without_a_cycle():
    kit_edges = {(a, b) for a, b in import_edges() if floor(a) == floor(b) == "kit"}
    assert ("kits/serverkit", "kits/enginekit") in kit_edges  # the client builds on the engine kit's batching
    reached = {source: {target for s, target in kit_edges if s == source} for source, _ in kit_edges}
    for _ in range(len(reached)):  # the transitive closure
        reached = {source: targets.union(*(reached.get(t, set()) for t in targets)) for source, targets in reached.items()}
    assert sorted(kit for kit, targets in reached.items() if kit in targets) == []
