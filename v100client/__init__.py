"""The command-line client of v100site's REST API (/api/v1/), for CI jobs: httpx only, no
Django. `v100 submit workload.yaml --wait` queues a run, follows it and exits non-zero when it
failed, carried a fatal validity flag or regressed against a baseline."""
