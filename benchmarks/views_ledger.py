"""The prediction ledger's pages: a prediction behind its permalink, /accuracy/ with its scatter and
CSV."""
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render

from benchmarks.advisor.backends import ENGINES
from benchmarks.advisor.correction import CORRECTED, SHORT, PRIOR_RUNS
from benchmarks.decorators import permalink
from benchmarks.engine import backends
from benchmarks.ledger import selectors
from benchmarks.models import PredictionPair


@permalink
def prediction_detail(request, public_id: str):
    p = selectors.prediction_by_public_id(public_id)
    return render(request, "benchmarks/prediction_detail.html", {
        "p": p, **selectors.prediction_detail(p),
        "permalink": request.build_absolute_uri(p.get_absolute_url())})


def _query_or_errors(request):
    try:
        return selectors.accuracy_query(request.GET), None
    except selectors.QueryError as e:
        return None, {e.field: [e.message]}


@login_required
def accuracy(request):
    """Members only: every point links to a run's permalink."""
    q, errors = _query_or_errors(request)
    context = {"errors": errors, "q": q or {}, "engines": [(k, backends.label(k)) for k in ENGINES],
               "metrics": [(m, SHORT[m]) for m in CORRECTED], "prior_runs": PRIOR_RUNS,
               "gpus": sorted(set(PredictionPair.objects.values_list("gpu_name", flat=True)))}
    if q is not None:
        context["groups"] = groups = selectors.accuracy_groups(q)
        context["querystring"] = urlencode(q)
        # One scatter per figure measured, each in its own unit.
        shown = [m for m in CORRECTED if any(g["metric"] == m for g in groups)]
        context["charts"] = [(m, urlencode({**q, "metric": m})) for m in shown]
    return render(request, "benchmarks/accuracy.html", context, status=400 if errors else 200)


@login_required
def accuracy_chart(request):
    q, errors = _query_or_errors(request)
    if errors:
        return JsonResponse({"error": "invalid query", "errors": errors}, status=400)
    return JsonResponse(selectors.accuracy_figure(q))


@login_required
def accuracy_csv(request):
    q, errors = _query_or_errors(request)
    if errors:
        return JsonResponse({"error": "invalid query", "errors": errors}, status=400)
    response = HttpResponse(selectors.ledger_csv(q, absolute=request.build_absolute_uri),
                            content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="prediction-ledger.csv"'
    return response
