"""The code's shape: no module in the source packages over 1,000 lines, no function over 120.

A module past that size has seams that want to be modules of their own; a function past it has steps that
want names. ``python -m tests.test_code_shape`` lists the offenders (exit status 1 when there are any).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

pytestmark = pytest.mark.unit

ROOT: Final = Path(__file__).resolve().parent.parent
PACKAGES: Final = ("app", "collectors", "analytics")
MAX_MODULE_LINES: Final = 1000
MAX_FUNCTION_LINES: Final = 120


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int, int]]:
    """(qualified name, first line, lines) of every function and method, nested ones included; a
    function's lines run from its ``def`` to its last line."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            assert node.end_lineno is not None
            yield name, node.lineno, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def offenders(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """One line per module over :data:`MAX_MODULE_LINES` and per function over :data:`MAX_FUNCTION_LINES`
    in ``packages`` under ``root``, as ``path: ...`` relative to ``root``."""
    found: list[str] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8")
            lines = len(text.splitlines())
            if lines > MAX_MODULE_LINES:
                found.append(f"{relative}: module of {lines} lines (at most {MAX_MODULE_LINES})")
            for name, first, length in _functions(ast.parse(text, filename=relative)):
                if length > MAX_FUNCTION_LINES:
                    limit = f"(at most {MAX_FUNCTION_LINES})"
                    found.append(f"{relative}:{first}: function {name} of {length} lines {limit}")
    return found


def test_no_module_or_function_is_too_long() -> None:
    found = offenders()
    assert not found, "too long:\n" + "\n".join(found)


def test_offenders_names_a_long_module_and_a_long_method_and_passes_the_rest(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (package / "sub" / "long_method.py").write_text(
        "class Broker:\n    def fits(self) -> None:\n        pass\n\n    def stop(self) -> None:\n" + body
    )
    (package / "long_module.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (package / "at_the_limits.py").write_text(
        "x = 1\n" * (MAX_MODULE_LINES - MAX_FUNCTION_LINES)
        + "def f() -> None:\n"
        + "    pass\n" * (MAX_FUNCTION_LINES - 1)
    )

    assert offenders(tmp_path, ("pkg",)) == [
        f"pkg/long_module.py: module of {MAX_MODULE_LINES + 1} lines (at most {MAX_MODULE_LINES})",
        f"pkg/sub/long_method.py:5: function Broker.stop of {MAX_FUNCTION_LINES + 1} lines "
        f"(at most {MAX_FUNCTION_LINES})",
    ]


if __name__ == "__main__":
    found = offenders()
    print("\n".join(found) if found else "no module or function is too long")
    sys.exit(1 if found else 0)
