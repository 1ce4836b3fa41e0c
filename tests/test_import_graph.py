"""The folders of jaxnat/ import one another one way: models do not import training, evaluation and decoding
do not import each other in a loop, a model family imports nothing above the models, and so on. Nodes are jaxnat's
subpackages and top-level modules, and each model family's package (jaxnat/models/<family>/: it sits above the
shared code, which finds it by name at run time, `jaxnat.models.family_of`); an edge is any `import` of one from
another, at module level or inside a function."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxnat"


FAMILIES = {p.name for p in (ROOT / "models").iterdir() if (p / "__init__.py").is_file()}


def node(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["models"] and parts[2:3] and parts[2] in FAMILIES else parts[:2])


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        here = node(".".join(path.relative_to(ROOT.parent).with_suffix("").parts))
        edges = graph.setdefault(here, set())
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                names = [n.module] if n.module != "jaxnat" else [f"jaxnat.{a.name}" for a in n.names]
            elif isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            edges.update(node(m) for m in names if m.startswith("jaxnat.") and node(m) != here)
    return graph


def find_cycle(graph):
    state, stack = {}, []

    def visit(v):
        state[v] = "open"
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == "open":
                return stack[stack.index(w):] + [w]
            if w not in state and (cycle := visit(w)):
                return cycle
        state[v] = "done"
        stack.pop()
        return None

    for v in sorted(graph):
        if v not in state and (cycle := visit(v)):
            return cycle
    return None


def test_folder_graph_is_acyclic():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


def test_layers():
    graph = import_graph()
    assert "jaxnat.training" not in graph["jaxnat.models"]
    assert "jaxnat.evaluation" not in graph["jaxnat.decoding"]
    for low in ("jaxnat.edit_ops", "jaxnat.oracle", "jaxnat.data", "jaxnat.decoding"):
        assert "jaxnat.models" not in graph[low], low
    # the shared code knows no family: only families import families (one that extends or builds on another)
    families = {f"jaxnat.models.{name}" for name in FAMILIES}
    assert families >= {"jaxnat.models.ar", "jaxnat.models.cmlm"}
    for here, edges in graph.items():
        if here not in families:
            assert not edges & families, f"{here} imports {sorted(edges & families)}"
    # and a family imports nothing above the models: what the shared model code may import, the models, other
    # families and the metrics (which import only data, errors and paths, a leaf); the layers above hand it the rest
    below = graph["jaxnat.models"] | {"jaxnat.models", "jaxnat.evaluation"} | families
    assert graph["jaxnat.evaluation"] <= {"jaxnat.data", "jaxnat.errors", "jaxnat.paths"}
    assert graph["jaxnat.paths"] <= {"jaxnat.errors"}
    for family in families:
        assert graph[family] <= below, f"{family} imports {sorted(graph[family] - below)}"


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
