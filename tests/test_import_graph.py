"""No import circles in the package (issue #25): read every ``import`` of ``topic_lineage`` and
``spark_jobs``, at module level and inside functions alike (a lazy import still ties two modules
together), and find the strongly connected components of that graph. The package never imports
``spark_jobs`` (the thin spark-submit entry over it)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def modules() -> dict[str, Path]:
    found = {}
    for path in [*ROOT.glob("topic_lineage/**/*.py"), *ROOT.glob("spark_jobs/*.py")]:
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


# Parsed in a process of its own: in CPython 3.11 ast.parse's recursion depth check is not per
# thread, so a parse racing another thread's (a background import still running from an earlier
# test in this worker) can fail with "AST constructor recursion depth mismatch" (seen once in CI).
_PARSE = """
import ast, json, sys
trees = {}
for path in json.load(sys.stdin):
    nodes = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            nodes.append(["import", None, 0, [a.name for a in node.names]])
        elif isinstance(node, ast.ImportFrom):
            nodes.append(["from", node.module, node.level, [a.name for a in node.names]])
    trees[path] = nodes
json.dump(trees, sys.stdout)
"""


def import_statements(paths: list[Path]) -> dict[str, list]:
    """Every import statement of each file: [kind, module, level, names]."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PARSE], input=json.dumps([str(p) for p in paths]),
                          capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout)


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    statements = import_statements(list(mods.values()))

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for kind, module, level, names in statements[str(path)]:
            if kind == "import":
                targets = names
            else:
                base = module or ""
                if level:
                    parts = package.split(".")[: len(package.split(".")) - level + 1]
                    base = ".".join([*parts, base] if base else parts)
                # `from pkg import submodule` depends on the submodule, not on pkg's __init__
                submodules = [f"{base}.{name}" for name in names if f"{base}.{name}" in mods]
                targets = submodules if len(submodules) == len(names) else [base, *submodules]
            for target in targets:
                resolved = resolve(target)
                if resolved is not None and resolved != name:
                    graph[name].add(resolved)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_the_package_never_imports_spark_jobs():
    graph = import_graph()
    offenders = sorted(name for name, targets in graph.items()
                       if name.startswith("topic_lineage") and any(t.startswith("spark_jobs") for t in targets))
    assert offenders == []


def test_the_package_imports_nothing_of_the_tests():
    """The product never imports the tests (``tests/servers/``: servers only the tests start,
    not in the wheel), at module level or inside a function."""
    found = []
    for path, statements in import_statements(list(modules().values())).items():
        for kind, module, level, names in statements:
            targets = names if kind == "import" else [module or ""] if level == 0 else []
            found += [(path, t) for t in targets if t == "tests" or t.startswith("tests.")]
    assert found == []
