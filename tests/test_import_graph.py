"""The import graph of the project's packages: no module imports itself back through others,
koordcommon (the contracts) never reaches koordsim (the simulated cluster), and the descheduler
works against the cluster port alone.

`.venv/bin/python tests/test_import_graph.py` prints the cycles and the forbidden chains (none).
"""

from __future__ import annotations

import grimp
import pytest

PACKAGES = (
    "koordcommon", "koordsim", "koordctl", "descheduler", "metrics_collector", "node_agent", "recommender",
    "scheduler_extender", "slo_controller",
)
# importer -> packages it must not reach, directly or through others
FORBIDDEN = {"koordcommon": ("koordsim",), "descheduler": ("koordsim",)}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return build()


def build() -> grimp.ImportGraph:
    # imports under `if TYPE_CHECKING:` run only for type checkers, not at import time
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(adj):
        if root in index:
            continue
        # iterative depth-first search: (module, position in its adjacency list)
        work = [(root, 0)]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, i = work[-1]
            if i < len(adj[v]):
                work[-1] = (v, i + 1)
                w = adj[v][i]
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def forbidden_chains(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    out = []
    for importer, banned in FORBIDDEN.items():
        for imported in banned:
            chain = graph.find_shortest_chain(importer=importer, imported=imported, as_packages=True)
            if chain:
                out.append(tuple(chain))
    return out


def test_the_cycle_finder_finds_a_cycle():
    g = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        g.add_import(importer=a, imported=b)
    assert cycles(g) == [["p.a", "p.b", "p.c"]]


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_the_contracts_and_the_descheduler_never_reach_the_simulator(graph):
    assert "koordsim.cluster" in graph.modules and "koordcommon.cluster.backends" in graph.modules
    assert forbidden_chains(graph) == []
    # the simulator builds on the contracts, never the other way round
    assert graph.chain_exists(importer="koordsim", imported="koordcommon", as_packages=True)


if __name__ == "__main__":
    g = build()
    print(f"{len(g.modules)} modules in {', '.join(PACKAGES)}")
    print("import cycles:", cycles(g) or "none")
    print("forbidden chains:", forbidden_chains(g) or "none")
