"""No two modules of the grove package import each other, directly or through
others (issue 36: importer and runner, torch and training, then torch and ddp
did). Every import
counts, at the top of a module or inside a function; `import grove` (the
package, which only re-exports) does not. Read from the package's own files,
so it checks the installed wheel too."""
import ast
import os
import unittest

import grove
import junit_main


def grove_imports(path):
    """The grove modules (names under grove.) that the file at `path` imports."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "grove":
                names = ["grove." + alias.name for alias in node.names]
            else:
                names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "grove" and len(parts) > 1:
                found.add(parts[1])
    return found


def import_graph(package_dir):
    modules = {name[:-3] for name in os.listdir(package_dir)
               if name.endswith(".py") and name != "__init__.py"}
    return {module: grove_imports(os.path.join(package_dir, module + ".py")) & modules
            for module in sorted(modules)}


def find_cycle(graph):
    """One cycle of `graph` as a list of modules, or None."""
    state = {}  # module -> "open" while on the path, "done" after

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return path[path.index(target):] + [module, target] if target in path else \
                    [module, target]
            if target not in state:
                cycle = visit(target, path + [module])
                if cycle:
                    return cycle
        state[module] = "done"
        return None

    for module in graph:
        if module not in state:
            cycle = visit(module, [])
            if cycle:
                return cycle
    return None


class ImportCyclesTest(unittest.TestCase):
    def test_the_package_has_no_import_cycle(self):
        graph = import_graph(os.path.dirname(os.path.abspath(grove.__file__)))
        self.assertIn("runner", graph["importer"])  # the scan sees imports at all
        self.assertIn("training_steps", graph["dynamo_backend"])  # and those inside functions
        cycle = find_cycle(graph)
        self.assertIsNone(cycle, "grove modules import each other: %s"
                          % " -> ".join(cycle or []))

    def test_a_cycle_is_found_and_named(self):
        cycle = find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()})
        self.assertEqual(cycle, ["a", "b", "c", "a"])
        self.assertIsNone(find_cycle({"a": {"b"}, "b": set()}))


if __name__ == "__main__":
    junit_main.main()
