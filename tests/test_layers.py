"""The import structure of the product's packages, read from the code (no process, no import): imports run one way,
and an import made inside a function is there to keep a heavy library out of its module, never to hide a cycle."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.support.helpers import REPO

PACKAGES = ("include", "spark_jobs", "dags")
# Libraries whose import costs time or memory a DAG file's parse, the CLI's start or a light process should not pay.
HEAVY = {"airflow", "boto3", "botocore", "confluent_kafka", "delta", "deltalake", "duckdb", "great_expectations",
         "matplotlib", "numpy", "openlineage", "pandas", "psycopg2", "py4j", "pyarrow", "pyspark", "selenium",
         "sqlalchemy"}


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")] = path
    return found


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement loads: its module, and each imported name that is a project module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if modules()[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules()]


@cache
def imports(module: str) -> tuple[frozenset[str], tuple[tuple[int, tuple[str, ...]], ...]]:
    """The modules `module` imports at its top (TYPE_CHECKING blocks left out), and its imports inside functions
    (line, targets)."""
    tree = ast.parse(modules()[module].read_text())
    top, inner = set(), []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if in_function:
                    inner.append((child.lineno, tuple(_targets(module, child))))
                else:
                    top.update(_targets(module, child))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return frozenset(top), tuple(inner)


def loaded_by(name: str) -> set[str]:
    """Every module importing `name` loads through top-level imports (a dotted name loads its parents too)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        parts = todo.pop().split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix not in seen:
                seen.add(prefix)
                if prefix in modules():
                    todo.extend(imports(prefix)[0])
    return seen


def heavy(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names} & HEAVY


def test_an_import_inside_a_function_keeps_a_heavy_library_out_of_its_module():
    needless = []
    for module in modules():
        own = heavy(loaded_by(module))
        for line, targets in imports(module)[1]:
            kept_out = heavy(set().union(*(loaded_by(t) for t in targets))) - own
            if not kept_out:
                needless.append(f"{modules()[module].relative_to(REPO)}:{line} imports {targets[-1]} inside a "
                                "function, which loads no heavy library its module does not load already")
    assert not needless, "\n".join(needless)


def test_no_package_imports_one_that_imports_it_back():
    """Counting imports inside functions too; a package is a top-level one's direct child (include.storage, ...)."""

    def package(name: str) -> str | None:
        return ".".join(name.split(".")[:2]) if name.split(".")[0] in PACKAGES else None

    edges: dict[str, set[str]] = {}
    for module in modules():
        top, inner = imports(module)
        for target in set(top) | {t for _, targets in inner for t in targets}:
            source_package, target_package = package(module), package(target)
            if target_package and target_package != source_package and not module.startswith(target_package + "."):
                edges.setdefault(source_package, set()).add(target_package)

    def reaches(start: str, goal: str) -> list[str] | None:
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            for nxt in sorted(edges.get(path[-1], ())):
                if nxt == goal:
                    return path + [nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    paths.append(path + [nxt])
        return None

    loops = {" -> ".join(loop) for a in edges for loop in [reaches(a, a)] if loop}
    assert not loops, sorted(loops)



def test_no_test_module_imports_another():
    """Shared helpers live in tests/support/; a test module is imported by pytest alone."""
    borrowed = []
    for path in sorted((REPO / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            borrowed += [f"{path.name} imports {name}" for name in names
                         if name.split(".")[-1].startswith("test_") or name.startswith("tests.test_")]
    assert not borrowed, borrowed


def test_no_name_a_module_imports_is_bound_again_in_it():
    """A nested def, a parameter, a local or a module-level statement named like one of its module's imports makes a
    call in its scope reach something else (a DAG's task function named like the code it calls calls itself)."""
    rebound = []
    for path in modules().values():
        tree = ast.parse(path.read_text())
        imported = {(alias.asname or alias.name).split(".")[0] for node in tree.body
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        methods = {id(node) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) for node in cls.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = None if node in tree.body or id(node) in methods else node.name
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                name = node.id
            else:
                name = node.arg if isinstance(node, ast.arg) else None
            if name in imported:
                rebound.append(f"{path.relative_to(REPO)}:{node.lineno} binds {name!r}, a name the module imports")
    assert not rebound, "\n".join(rebound)


# The control plane: supervision, the Airflow side, the command line, the production topology. The engine runs below
# it, so that a job process needs none of it and the control plane may start, watch and stop jobs.
CONTROL_PLANE = ("include.ops", "include.airflow", "include.cli", "include.cluster")


def _reached(module: str) -> dict[str, list[str]]:
    """Every project module `module` reaches through its imports (inside functions too), with one path to each."""
    paths, todo = {module: [module]}, [module]
    while todo:
        current = todo.pop()
        top, inner = imports(current)
        for target in sorted(set(top) | {t for _, targets in inner for t in targets}):
            while target and target not in modules():
                target = target.rpartition(".")[0]
            if target and target not in paths:
                paths[target] = paths[current] + [target]
                todo.append(target)
    return paths


def test_the_engine_imports_nothing_of_the_control_plane():
    """spark_jobs reaches no module of include/ops, include/airflow, include/cli or include/cluster, directly or
    through the library (the process contract, the records and the preflight sit below both)."""
    crossings = []
    for module in (m for m in modules() if m.startswith("spark_jobs")):
        for target, path in _reached(module).items():
            if any(target == plane or target.startswith(plane + ".") for plane in CONTROL_PLANE):
                crossings.append(" -> ".join(path))
                break
    assert not crossings, "\n".join(crossings)


def test_no_program_of_the_product_hides_in_a_string():
    """Code run from a string (`python -c`, exec) imports where neither the import graph nor these tests see it: a
    program is a module, started by its name."""
    hidden = []
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value:
                lines = [line.strip() for line in node.value.splitlines()]
                if any(line.split(" ")[:1] in (["import"], ["from"]) and line.split(" ")[1:2]
                       and line.split(" ")[1].split(".")[0] in PACKAGES for line in lines):
                    hidden.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not hidden, hidden


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 80


def test_modules_and_functions_stay_readable():
    """No product module over 450 lines, no function over 80: a newcomer reads one at a time."""
    long = []
    for path in modules().values():
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(REPO)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {size} lines")
    assert not long, "\n".join(long)
