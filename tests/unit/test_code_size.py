"""No product file over 500 lines and no function over 60 (from its `def` to its last line): a longer one is split,
a file into modules with one job each, a function into named steps."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Product code: every top-level package but these (and hidden folders).
NOT_PRODUCT = {"tests", "bench", ".venv"}
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60


def product_files() -> list[Path]:
    """Every .py file of the product's top-level packages."""
    return sorted(path for folder in ROOT.iterdir()
                  if folder.is_dir() and folder.name not in NOT_PRODUCT and not folder.name.startswith(".")
                  for path in folder.rglob("*.py"))


def functions(tree: ast.AST, scope: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, lines from `def` to its last line) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{scope}{node.name}", node.end_lineno - node.lineno + 1
            yield from functions(node, f"{scope}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{scope}{node.name}.")
        else:
            yield from functions(node, scope)


def test_product_code_is_found():
    files = {str(path.relative_to(ROOT)) for path in product_files()}
    assert {"core/state.py", "cutover/swap.py", "cli/main.py"} <= files
    assert not any(name.startswith(("tests/", "bench/", ".venv/")) for name in files)


def test_no_product_file_is_over_500_lines():
    long_files = [f"{path.relative_to(ROOT)}: {lines} lines" for path in product_files()
                  if (lines := len(path.read_text().splitlines())) > MAX_FILE_LINES]
    assert not long_files, f"split by responsibility (at most {MAX_FILE_LINES} lines each):\n" + "\n".join(long_files)


def test_no_function_is_over_60_lines():
    long_functions = [f"{path.relative_to(ROOT)}: {name} ({lines} lines)" for path in product_files()
                      for name, lines in functions(ast.parse(path.read_text(), str(path)))
                      if lines > MAX_FUNCTION_LINES]
    assert not long_functions, (f"split into named steps (at most {MAX_FUNCTION_LINES} lines each):\n"
                                + "\n".join(long_functions))


def test_a_function_is_counted_from_def_to_its_last_line():
    source = "class A:\n    @staticmethod\n    def f():\n        def g():\n            pass\n\n        return 1\n"
    assert list(functions(ast.parse(source))) == [("A.f", 5), ("A.f.g", 2)]
