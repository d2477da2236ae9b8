from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self):
        from django.conf import settings
        from django.utils.module_loading import import_string

        from benchmarks import alerts, schedules  # noqa: F401  (they listen for finished runs)
        from benchmarks.ledger import services as ledger  # noqa: F401  (it pairs finished runs and imports)
        from benchmarks.engine import load_modes

        for path in settings.LOAD_MODES_EXTRA:  # a site's own load modes, "module.path:ClassName"
            load_modes.register(import_string(path.replace(":", ".")))
