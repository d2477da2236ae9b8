"""Decisions: a stated workload -> the advisor's recommendation, saved behind a permalink.

- `forms.py`: the one validation of a decision's input (the page's form; /api/decide answers
  with the same form's errors as JSON), which turns it into the advisor's specs.
- `selectors.py`: reads (the GPU of a host, a registered model's shape, the measured evidence,
  saved decisions).
- `services.py`: decides and saves (the advisor itself is the Django-free benchmarks/advisor).
- `presenter.py`: what the decision page shows of a saved result (any version of it), and the
  "measure this next" links.
"""
