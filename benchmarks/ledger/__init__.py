"""The prediction ledger: every answer of the decision page and the API kept as a prediction, each
estimate paired with the runs (measured here or imported) that later measure it, the accuracy that
shows, and the correction the team's runs teach the estimates per host and engine.

- `models.py`: Prediction (immutable) and PredictionPair.
- `services.py`: recording a prediction, pairing a finished run or an imported report.
- `selectors.py`: a prediction with its pairs, a run's pairs in words, the accuracy table, the
  scatter and the CSV, and the corrections the advisor reads for a host.
The arithmetic (errors, bands, corrections, leave-one-run-out) is the Django-free
benchmarks/advisor/correction.py.
"""
