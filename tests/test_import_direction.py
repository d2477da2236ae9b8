"""Tasks call services; services never reach back for tasks, schedules or alerts (they send tasks
by name and tell a finished run's listeners by a signal). Read from the modules' own imports."""
import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "benchmarks"


def imported(module: str) -> set[str]:
    """Every benchmarks module `module` imports, at the top or inside a function."""
    tree = ast.parse((APP / f"{module}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchmarks"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("benchmarks"))
    return out


@pytest.mark.parametrize("module, never", [
    ("services", {"benchmarks.tasks", "benchmarks.schedules", "benchmarks.alerts"}),
    ("schedules", {"benchmarks.tasks", "benchmarks.alerts"}),
    ("alerts", {"benchmarks.tasks", "benchmarks.schedules"}),
])
def test_services_schedules_and_alerts_never_import_the_tasks_or_each_other_back(module, never):
    assert not imported(module) & never, imported(module) & never
