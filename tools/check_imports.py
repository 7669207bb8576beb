"""The import rules of loam_common that `make lint` checks (issue 17):

1. no import cycle among loam_common's modules (the generated code included): each
   layer imports only downward, so a module can be read knowing only what is below it;
2. no function-local import of a project module (`loam_*`): an import inside a
   function hides a dependency from the module's head, and is how cycles were held
   together. Optional third-party dependencies (pyarrow, aioboto3, tikv_client) may
   still be imported where they are used, so a machine without them runs the rest;
3. no private name (`_x`) of one loam_common module used by another: what modules
   share is public, named for what it does;
4. no module of loam_common imports jobs_pb2, the service's request and response
   types, except the contract's own (gen/, the method table in api/, the Connect
   client): the transitions take domain types and the records of types.proto.

The graph comes from grimp (what import-linter is built on), which reads every
import, those under `if TYPE_CHECKING:` included. Exits 1 with each cycle and each
local import named."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import grimp

PACKAGE = "loam_common"
PROJECT_PREFIXES = ("loam_", "loam.")  # loam_common, loam_queue_core, ..., and the SDK `loam`
PROJECT_MODULES = ("loam",)
RPC_TYPES = "loam_common.gen.loam.jobs.v1.jobs_pb2"
# The contract itself may name the RPC types: the method table declares each RPC's
# request and response, and the Connect client is built from them.
RPC_TYPES_ALLOWED = (f"{PACKAGE}.gen.", f"{PACKAGE}.api.", f"{PACKAGE}.connect_client")


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each a
    set of modules that import each other, in name order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    modules = sorted(graph.modules)

    for root in modules:
        if root in index:
            continue
        # Iterative DFS: (module, iterator over its imports).
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in graph.modules:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def is_project(module: str) -> bool:
    return module in PROJECT_MODULES or module.startswith(PROJECT_PREFIXES)


def local_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each import of a project module inside a function."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if in_function and isinstance(child, ast.Import):
                out.extend((child.lineno, a.name) for a in child.names if is_project(a.name))
            elif in_function and isinstance(child, ast.ImportFrom):
                if child.level or is_project(child.module or ""):
                    names = ", ".join(a.name for a in child.names)
                    out.append((child.lineno, f"{'.' * child.level}{child.module or ''} ({names})"))
            visit(child, inside)

    visit(tree, False)
    return out


def private_uses(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each private name of another project module this file uses:
    imported by name, or read off a module imported whole."""
    tree = ast.parse(path.read_text(), str(path))
    modules: set[str] = set()  # local names bound to project modules
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names if is_project(a.name))
        elif isinstance(node, ast.ImportFrom) and is_project(node.module or ""):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append((node.lineno, f"{node.module}.{a.name}"))
                elif _is_package(node.module) and importlib.util.find_spec(f"{node.module}.{a.name}"):
                    modules.add(a.asname or a.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            out.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return out


def _is_package(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.submodule_search_locations is not None


def main() -> int:
    graph = grimp.build_graph(PACKAGE)
    problems = []
    for component in cycles(graph):
        problems.append("import cycle: " + " <-> ".join(component))
    for module in sorted(graph.find_modules_that_directly_import(RPC_TYPES)):
        if not module.startswith(RPC_TYPES_ALLOWED):
            problems.append(f"{module} imports {RPC_TYPES}: take domain types or types.proto records")
    root = Path(importlib.util.find_spec(PACKAGE).origin).parent
    for path in sorted(root.rglob("*.py")):
        if "gen" in path.relative_to(root).parts:
            continue
        for line, module in local_imports(path):
            problems.append(f"{path}:{line}: function-local import of {module}; import it at the top")
        for line, name in private_uses(path):
            problems.append(
                f"{path}:{line}: {name} is private to its module; make it public or keep it there"
            )
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} import problem(s) in {PACKAGE}", file=sys.stderr)
        return 1
    print(
        f"{PACKAGE}: {len(graph.modules)} modules; no import cycle, function-local project import, "
        "private name shared or RPC type outside gen/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
