"""Package imports go one way: a package imports only packages on lower floors (README.md, Layout)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# lowest first; a package may import only packages listed before it
FLOORS = ["core", "throttle", "streams", "connectors", "monitor", "applier", "cutover", "migration", "stack", "cli",
          "demo"]


def imported_packages(package: str) -> dict[str, set[str]]:
    """{module path: top-level project packages it imports}, for every module of `package`."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
        found[str(path.relative_to(ROOT))] = (names & set(FLOORS)) - {package}
    return found


def test_every_import_goes_down_a_floor():
    upward = [f"{module} imports {other}" for package in FLOORS
              for module, others in imported_packages(package).items() for other in others
              if FLOORS.index(other) > FLOORS.index(package)]
    assert upward == []


def test_no_two_packages_reach_each_other():
    reaches = {p: set().union(*imported_packages(p).values()) for p in FLOORS}
    changed = True
    while changed:   # transitive closure
        changed = False
        for p in FLOORS:
            wider = reaches[p].union(*(reaches[q] for q in reaches[p]))
            if wider != reaches[p]:
                reaches[p], changed = wider, True
    assert [(a, b) for a in FLOORS for b in FLOORS if a < b and b in reaches[a] and a in reaches[b]] == []
