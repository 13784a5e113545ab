"""The layers of the product packages hold.

Every import in node/, harness/, nemeses/, workloads/ and reports/ is read with `ast`: at module
level, inside functions and under `if TYPE_CHECKING:` alike, since each is a dependency of the
module. `import a.b` is an edge to `a.b`; `from a import b` is an edge to `a.b` when that is a
module, else to `a`; relative imports are resolved against the importing module's package. Only
edges between the project's own modules count. The parent packages an import runs on the way
(`a/__init__.py` for `a.b`) are not edges: the rules speak of what a module names.

The rules:
- the engine (all of node/) reaches nothing in harness, nemeses, workloads or reports, with no
  exception: a server deploys without the harness, and the simulators live beside it;
- the whole-stack simulator (harness/sim/) may drive the harness's runner, recorder, workloads and
  checkers, but never reaches the `tessera test` command (harness.chaos, harness.chaos_cli) nor a
  system's deployment (harness.deployment, harness.systems.*.deployment);
- the nemeses and the workloads reach a system only through the protocols it offers (faults:
  Deployment's offers; workloads: workloads.base.KVClient and workloads.outcomes): never the
  engine (node/) nor a system's package (harness/systems/);
- the checkers (reports/checkers/) reach nothing in harness;
- no two modules import each other, directly or around a longer circle;
- the exit codes live in one leaf module, EXIT_CODES, that imports nothing from the project, and
  no other module defines them.

"Reaches" is through any chain of imports that leaves the layer: a sim module that imports a
runner that imports harness.chaos reaches harness.chaos. A failure names every hop, file:line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from reports.checkers.graph import strongly_connected

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("node", "harness", "nemeses", "workloads", "reports")
EXIT_CODES = "node.exit_codes"
EXIT_NAMES = ("EXIT", "BAD_ARGS", "CRASHED", "verdict_exit")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported project module
    where: str  # file:line of the import statement

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


Graph = dict[str, list[Import]]  # module -> its imports of project modules, in file order


@dataclass(frozen=True)
class Rule:
    name: str
    layer: Callable[[str], bool]  # the modules the rule binds
    forbidden: Callable[[str], bool]  # the modules they must not reach


def within(*prefixes: str) -> Callable[[str], bool]:
    return lambda m: any(m == p or m.startswith(p + ".") for p in prefixes)


RULES = (
    Rule("the engine (node/) must not reach the harness, nemeses, workloads or reports",
         within("node"),
         within("harness", "nemeses", "workloads", "reports")),
    Rule("the simulator (harness/sim/) must not reach the `tessera test` command or a system's "
         "deployment", within("harness.sim"),
         lambda m: within("harness.chaos", "harness.chaos_cli", "harness.deployment")(m)
         or re.fullmatch(r"harness\.systems\.\w+\.deployment", m) is not None),
    Rule("the nemeses must not reach the engine (node/) or a system's package (harness/systems/)",
         within("nemeses"), within("node", "harness.systems")),
    Rule("the workloads must not reach the engine (node/) or a system's package "
         "(harness/systems/)", within("workloads"), within("node", "harness.systems")),
    Rule("the checkers (reports/checkers/) must not reach the harness", within("reports.checkers"),
         within("harness")),
)


# --- reading the imports ---------------------------------------------------------------------


def module_files(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Module name -> file, for every .py file under the packages (a package is its
    __init__.py)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(module: str, path: Path, modules: Iterable[str], root: Path) -> list[Import]:
    """The project modules that `module` (at `path`) imports, each with its file:line."""
    modules = set(modules)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    rel = path.relative_to(root)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            # `import a.b.c` of a name that is no module here (a missing file) still counts
            # as its nearest module: the package that would hold it.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.append(Import(module, target, f"{rel}:{node.lineno}"))
    return sorted(found, key=lambda i: (int(i.where.rpartition(":")[2]), i.target))


def build_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> Graph:
    files = module_files(root, packages)
    return {m: imports_of(m, p, files, root) for m, p in files.items()}


# --- judging the graph -----------------------------------------------------------------------


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, the
    checkers' own): each is a set of modules that import one another around a circle."""
    components = strongly_connected(sorted(graph),
                                    lambda m: sorted({i.target for i in graph.get(m, [])}))
    return sorted(sorted(c) for c in components)


def circle(graph: Graph, component: list[str]) -> list[Import]:
    """One circle of imports through a component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    parent: dict[str, Import] = {}
    frontier = [start]
    while frontier:  # breadth first, inside the component, back to the start
        nxt = []
        for m in frontier:
            for imp in graph.get(m, []):
                if imp.target == start:
                    hops = [imp]
                    while hops[0].source != start:
                        hops.insert(0, parent[hops[0].source])
                    return hops
                if imp.target in members and imp.target not in parent:
                    parent[imp.target] = imp
                    nxt.append(imp.target)
        frontier = nxt
    raise AssertionError(f"{component} is no cycle")


def violations(graph: Graph, rules: Iterable[Rule] = RULES) -> list[tuple[Rule, list[Import]]]:
    """For each module a rule binds: every import of a forbidden module it makes, and each
    forbidden module it reaches only through other modules, by the shortest chain of imports.
    The search does not go on through another module of the same layer (that one is judged by
    itself) nor past a forbidden module (the first one is the finding)."""
    found = []
    for rule in rules:
        for source in sorted(m for m in graph if rule.layer(m)):
            direct = [i for i in graph.get(source, []) if rule.forbidden(i.target)]
            found += [(rule, [i]) for i in direct]
            parent: dict[str, Import] = {i.target: i for i in direct}
            frontier = [source]
            while frontier:
                nxt = []
                for m in frontier:
                    for imp in graph.get(m, []):
                        t = imp.target
                        if t in parent or t == source or (rule.layer(t) and not rule.forbidden(t)):
                            continue
                        parent[t] = imp
                        if rule.forbidden(t):
                            chain = [imp]
                            while chain[0].source != source:
                                chain.insert(0, parent[chain[0].source])
                            found.append((rule, chain))
                        else:
                            nxt.append(t)
                frontier = nxt
    return found


def report(graph: Graph, rules: Iterable[Rule] = RULES) -> list[str]:
    """Every finding, as lines a failing test prints."""
    lines = []
    for rule, chain in violations(graph, rules):
        lines.append(f"{rule.name}: {chain[0].source} reaches {chain[-1].target}\n"
                     + "\n".join(f"    {imp}" for imp in chain))
    for component in cycles(graph):
        lines.append(f"import cycle among {', '.join(component)}\n"
                     + "\n".join(f"    {imp}" for imp in circle(graph, component)))
    return lines


# --- the project -----------------------------------------------------------------------------


def test_the_product_packages_keep_their_layers():
    graph = build_graph()
    assert len(graph) > 100 and sum(map(len, graph.values())) > 300  # the reader saw the tree
    problems = report(graph)
    assert not problems, "\n" + "\n".join(problems)


def exit_code_problems(root: Path, graph: Graph) -> list[str]:
    """Where the exit codes are defined outside EXIT_CODES, or used by a module that does not
    take them from it; and whether EXIT_CODES itself is a leaf."""
    if EXIT_CODES not in graph:
        return [f"no module {EXIT_CODES}"]
    problems = [f"{EXIT_CODES} is no leaf: {i}" for i in graph[EXIT_CODES]]
    for module, path in module_files(root).items():
        if module == EXIT_CODES:
            continue
        where = path.relative_to(root)
        takes = any(i.target == EXIT_CODES for i in graph[module])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id in EXIT_NAMES:
                if isinstance(node.ctx, ast.Store):
                    problems.append(f"{where}:{node.lineno}: defines {node.id} (an exit code)")
                elif not takes:
                    problems.append(f"{where}:{node.lineno}: uses {node.id} without taking it "
                                    f"from {EXIT_CODES}")
            elif isinstance(node, ast.FunctionDef) and node.name in EXIT_NAMES:
                problems.append(f"{where}:{node.lineno}: defines {node.name} (an exit code)")
    return problems


def test_the_exit_codes_live_in_one_leaf_module():
    graph = build_graph()
    problems = exit_code_problems(ROOT, graph)
    assert not problems, "\n" + "\n".join(problems)
    users = {m for m, imps in graph.items() if any(i.target == EXIT_CODES for i in imps)}
    verdict_commands = {"harness.cli", "harness.chaos_cli", "harness.matrix_cli", "harness.replay",
                        "reports.analyze", "reports.checkers.cli"}
    assert verdict_commands <= users, f"{verdict_commands - users} do not take their exit codes " \
                                      f"from {EXIT_CODES}"


MAX_CLASS_LINES = 600
LARGE_BY_DESIGN = {"node.consensus.core.RaftCore"}  # the pure core: one state machine, no I/O


BOUNDED = ("node", "harness/sim")  # the engine, and the simulator that drives all of it


def large_classes(root: Path = ROOT, limit: int = MAX_CLASS_LINES) -> list[str]:
    """`module.Class (N lines)` for each class of the engine or the simulator longer than
    `limit`, nested ones too."""
    out = []
    for path in sorted(p for d in BOUNDED for p in (root / d).rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(n, ast.ClassDef) and n.end_lineno - n.lineno + 1 > limit:
                out.append(f"{module}.{n.name} ({n.end_lineno - n.lineno + 1} lines)")
    return out


def test_no_class_of_the_engine_or_its_simulator_outgrows_one_owner():
    """A class over 600 lines holds more than one owner's state (Replica held reads,
    leases and the copy source's pins before node/read_only.py and node/copy_pins.py)."""
    too_large = [c for c in large_classes() if c.split(" ")[0] not in LARGE_BY_DESIGN]
    assert not too_large, too_large


def test_a_planted_large_class_is_found(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(12))
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "big.py").write_text(f"class Big:\n{body}\n\n\nclass Small:\n    y = 1\n")
    assert large_classes(tmp_path, limit=10) == ["node.big.Big (13 lines)"]


# --- the checks themselves, on planted trees -------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Graph:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return build_graph(tmp_path)


CLEAN = {
    "node/__init__.py": "",
    "node/wal.py": "import os\n",
    "node/replica.py": "from node import wal\nfrom . import wal as w2\n",
    "harness/sim/__init__.py": "",
    "harness/sim/stack.py": "from harness.runner import run\nfrom node.replica import x\n",
    "harness/__init__.py": "",
    "harness/runner.py": "def run():\n    from reports.checkers import check\n",
    "harness/chaos.py": "from harness import runner, deployment\n",
    "harness/deployment.py": "from node import replica\n",
    "harness/systems/etcd/deployment.py": "",
    "reports/__init__.py": "",
    "reports/checkers/__init__.py": "",
    "reports/checkers/check.py": "from ..history import read\n",
    "reports/history.py": "import json\n",
}


def test_the_reader_resolves_every_kind_of_import(tmp_path):
    graph = _tree(tmp_path, CLEAN)
    targets = {m: [i.target for i in imps] for m, imps in graph.items()}
    assert targets["node.replica"] == ["node.wal", "node.wal"]  # absolute and relative
    assert targets["harness.sim.stack"] == ["harness.runner", "node.replica"]
    assert targets["harness.runner"] == ["reports.checkers.check"]  # inside a function
    assert targets["harness.chaos"] == ["harness.deployment", "harness.runner"]
    assert targets["reports.checkers.check"] == ["reports.history"]  # from ..module import name
    assert targets["node.wal"] == []  # not the project's
    assert graph["harness.runner"][0].where == "harness/runner.py:2"


def test_a_clean_tree_passes(tmp_path):
    assert report(_tree(tmp_path, CLEAN)) == []


def test_a_planted_cycle_is_found(tmp_path):
    graph = _tree(tmp_path, {**CLEAN, "harness/deployment.py": "def f():\n    from harness import chaos\n"})
    assert cycles(graph) == [["harness.chaos", "harness.deployment"]]
    (problem,) = report(graph)
    assert "import cycle among harness.chaos, harness.deployment" in problem
    assert "harness/chaos.py:1: harness.chaos imports harness.deployment" in problem
    assert "harness/deployment.py:2: harness.deployment imports harness.chaos" in problem


def test_a_longer_cycle_and_a_self_contained_one_are_told_apart():
    graph = {m: [] for m in "abcdef"}
    for s, t in ("ab", "bc", "ca", "cd", "de", "ed", "ef"):
        graph[s].append(Import(s, t, f"{s}.py:1"))
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert [i.target for i in circle(graph, ["a", "b", "c"])] == ["b", "c", "a"]


def test_planted_forbidden_imports_are_found(tmp_path):
    graph = _tree(tmp_path, {
        **CLEAN,
        # engine -> harness, twice: at module level and in a function
        "node/tools.py": "from harness.cluster import up\ndef ksck():\n    import harness.cluster\n",
        "harness/sim/cell.py": "from harness.systems.etcd.deployment import Etcd\n",  # sim -> a deployment
        "harness/sim/stack.py": "from harness import runner\n",
        "harness/runner.py": "from harness.chaos_cli import say\n",  # sim -> runner -> chaos_cli
        "reports/checkers/cli.py": "from harness.cli import BAD_ARGS\n",  # checkers -> harness
        "harness/cli.py": "",
        "harness/cluster.py": "",
        "harness/chaos_cli.py": "",
    })
    problems = report(graph)
    assert len(problems) == 5, problems
    text = "\n".join(problems)
    assert "node/tools.py:1: node.tools imports harness.cluster" in text
    assert "node/tools.py:3: node.tools imports harness.cluster" in text
    assert "harness/sim/cell.py:1: harness.sim.cell imports harness.systems.etcd.deployment" in text
    assert ("harness.sim.stack reaches harness.chaos_cli\n"
            "    harness/sim/stack.py:1: harness.sim.stack imports harness.runner\n"
            "    harness/runner.py:1: harness.runner imports harness.chaos_cli") in text
    assert "reports/checkers/cli.py:1: reports.checkers.cli imports harness.cli" in text


def test_the_engine_may_not_reach_the_simulator_either(tmp_path):
    """The simulators live in harness/sim/: an engine module that imports one (to run itself on
    virtual time, say) breaks the engine's layer like any other harness import."""
    graph = _tree(tmp_path, {**CLEAN, "harness/sim/loop.py": "",
                             "node/server.py": "def f():\n    from harness.sim.loop import SimLoop\n"})
    (problem,) = report(graph)
    assert problem.startswith("the engine (node/) must not reach the harness")
    assert "node/server.py:2: node.server imports harness.sim.loop" in problem


def test_nemeses_and_workloads_may_not_reach_a_system_or_the_engine(tmp_path):
    """A fault reaches a system only through what it offers (nemeses.groups, .membership,
    .disk): a nemesis that sends a system's RPCs itself, or a workload that imports a system's
    client, breaks the layer."""
    graph = _tree(tmp_path, {**CLEAN, "nemeses/__init__.py": "", "workloads/__init__.py": "",
                             "harness/systems/tessera/members.py": "",
                             "nemeses/race.py": "from node.replica import Replica\n",
                             "nemeses/members.py": "from harness.systems.tessera import members\n",
                             "workloads/watch.py": "from harness.systems.etcd.deployment import C\n",
                             "node/errors.py": "",
                             "workloads/base.py": "from node.errors import OpFailed\n"})
    text = "\n".join(report(graph))
    assert "nemeses/race.py:1: nemeses.race imports node.replica" in text
    assert "nemeses/members.py:1: nemeses.members imports harness.systems.tessera.members" in text
    assert "workloads/watch.py:1: workloads.watch imports harness.systems.etcd.deployment" in text
    assert "workloads/base.py:1: workloads.base imports node.errors" in text


def test_planted_exit_codes_out_of_place_are_found(tmp_path):
    leaf = "from collections.abc import Iterable\nEXIT = {}\nBAD_ARGS, CRASHED = 254, 255\n"
    files = {**CLEAN, "node/exit_codes.py": leaf,
             "reports/checkers/cli.py": "from node.exit_codes import BAD_ARGS\nx = BAD_ARGS\n"}
    assert exit_code_problems(tmp_path, _tree(tmp_path, files)) == []
    files = {**files, "node/exit_codes.py": "from reports import history\n" + leaf,
             "harness/cli.py": "BAD_ARGS, CRASHED = 254, 255\n",
             "reports/analyze.py": "def run():\n    return BAD_ARGS\n"}
    assert exit_code_problems(tmp_path, _tree(tmp_path, files)) == [
        "node.exit_codes is no leaf: node/exit_codes.py:1: node.exit_codes imports "
        "reports.history",
        "harness/cli.py:1: defines BAD_ARGS (an exit code)",
        "harness/cli.py:1: defines CRASHED (an exit code)",
        "reports/analyze.py:2: uses BAD_ARGS without taking it from node.exit_codes",
    ]
