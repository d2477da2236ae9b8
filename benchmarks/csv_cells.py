"""Every CSV the product writes goes through `writer`: a text cell that a spreadsheet would read
as a formula (a recipe or endpoint named `=HYPERLINK(...)`, an error message starting with `-`)
is written with a leading apostrophe, OWASP's advice for CSV injection. Numbers are written as
they are, so a negative figure stays a number. Django-free."""
from __future__ import annotations

import csv

# A spreadsheet starts a formula at any of these (tab and carriage return too: some trim them first).
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def cell(value):
    if isinstance(value, str) and value.startswith(FORMULA_LEADS):
        return "'" + value
    return value


class _Writer:
    def __init__(self, out, **options):
        self._csv = csv.writer(out, **options)

    def writerow(self, row):
        return self._csv.writerow([cell(v) for v in row])

    def writerows(self, rows):
        for row in rows:
            self.writerow(row)


def writer(out, **options) -> _Writer:
    """csv.writer(out) whose text cells cannot start a formula."""
    return _Writer(out, **options)
