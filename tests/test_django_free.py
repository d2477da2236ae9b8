"""The engine, the advisor and the importers (and the chart and comparison builders) are free of
Django: each imports in a Python where Django cannot be imported at all, so they can be tested
and reused alone."""
import subprocess
import sys

from conftest import ROOT

DJANGO_FREE = ["benchmarks.engine", "benchmarks.advisor", "benchmarks.importers", "benchmarks.charts", "benchmarks.csv_cells",
               "benchmarks.compare"]

PROBE = r"""
import importlib, importlib.abc, pkgutil, sys

class NoDjango(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "django" or name.startswith("django."):
            raise ImportError(f"{name} imported (Django must not be needed)")
        return None

sys.meta_path.insert(0, NoDjango())
imported = []
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    imported.append(name)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        importlib.import_module(info.name)
        imported.append(info.name)
print("\n".join(imported))
"""


def test_the_engine_advisor_and_importers_import_without_django():
    done = subprocess.run([sys.executable, "-c", PROBE, *DJANGO_FREE], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = done.stdout.split()
    # Every submodule was really walked, not only the packages.
    assert {"benchmarks.engine.client", "benchmarks.engine.metrics", "benchmarks.advisor.engine",
            "benchmarks.importers.guidellm"} <= set(imported)


def test_the_probe_notices_a_module_that_needs_django():
    done = subprocess.run([sys.executable, "-c", PROBE, "benchmarks.models"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode != 0 and "Django must not be needed" in done.stderr
