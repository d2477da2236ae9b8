"""The decision page: the form, the saved decision behind its permalink, and the JSON API."""
import json

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.shortcuts import redirect, render

from benchmarks import selectors
from benchmarks.api.tokens import token_or_session
from benchmarks.decisions import presenter, services
from benchmarks.decisions import selectors as decision_selectors
from benchmarks.decisions.forms import INPUT_KEYS, DecisionForm
from benchmarks.decorators import api_login_required, permalink


def _errors(form) -> dict:
    return {k: [str(m) for m in v] for k, v in form.errors.items()}


def _api_body(raw: bytes) -> tuple[dict, bool]:
    """The JSON object sent; raises ValueError with the reason. What is in it is the form's to
    judge."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ValueError("send a JSON object with the workload's fields")
    unknown = sorted(set(body) - set(INPUT_KEYS) - {"save"})
    if unknown:
        raise ValueError(f"unknown fields: {', '.join(unknown)[:500]}; known: {', '.join(INPUT_KEYS)}, save")
    save = body.pop("save", False)
    if not isinstance(save, bool):
        raise ValueError("save must be true or false")
    return body, save


def _initial(request) -> dict:
    """?from=<public_id>: a saved decision's inputs ("change the workload"); ?host=<id>: the decision
    is for that registered host, its stated price filled in."""
    initial = decision_selectors.decision_inputs(request.GET.get("from")) or {}
    host = decision_selectors.host_by_id(request.GET.get("host"))
    if host is not None:
        initial = {**initial, "host": host.pk}
        price = host.hourly_price
        if price is not None:
            initial.update(price_ownership=price.ownership, price_per_hour=price.per_hour,
                           price_per_kwh=price.per_kwh, price_currency=price.currency)
    return initial


# --- views ------------------------------------------------------------------------------------

@login_required
def decision_new(request):
    form = DecisionForm(request.POST or None, initial=_initial(request))
    if request.method == "POST" and form.is_valid():
        return redirect(services.decision_create(owner=request.user, inputs=form.inputs, specs=form.specs))
    return render(request, "benchmarks/decision_new.html",
                  {"form": form, "recent": decision_selectors.decisions_recent(owner=request.user)})


@permalink
def decision_detail(request, public_id: str):
    decision = selectors.decision_by_public_id(public_id)
    return render(request, "benchmarks/decision_detail.html", {
        "decision": decision, "d": presenter.decision_display(decision.result),
        "prediction": decision.predictions.first(),
        "deleted_runs": selectors.deleted_runs_linked(decision.result),
        "measure_next": presenter.measure_next_links(decision.result),
        "measure_this": presenter.measure_this_link(decision.result),
        "permalink": request.build_absolute_uri(decision.get_absolute_url()),
    })


@token_or_session
@api_login_required
def decision_api(request):
    if request.method != "POST":
        return JsonResponse({"error": "POST a JSON workload"}, status=405, headers={"Allow": "POST"})
    try:
        body, save = _api_body(request.body)
    except RequestDataTooBig:
        return JsonResponse({"error": f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes; "
                                      "a workload is a few hundred"}, status=413)
    except ValueError as e:
        return JsonResponse({"error": str(e)}, status=400)
    form = DecisionForm(body)
    if not form.is_valid():
        return JsonResponse({"error": "invalid input", "errors": _errors(form)}, status=400)
    if not save:
        result, prediction = services.decision_answer(owner=request.user, specs=form.specs)
        return JsonResponse({"inputs": form.inputs, "recommendation": result, **_prediction(request, prediction)})
    decision = services.decision_create(owner=request.user, inputs=form.inputs, specs=form.specs)
    return JsonResponse({"inputs": decision.inputs, "recommendation": decision.result, "public_id": decision.public_id,
                         "permalink": request.build_absolute_uri(decision.get_absolute_url()),
                         **_prediction(request, decision.predictions.first())}, status=201)


def _prediction(request, prediction) -> dict:
    """The answer's place in the prediction ledger: its public id, its page and its API address."""
    return {"prediction": {"public_id": prediction.public_id,
                           "permalink": request.build_absolute_uri(prediction.get_absolute_url()),
                           "api": request.build_absolute_uri(f"/api/v1/predictions/{prediction.public_id}/")}}
