"""Pages of scheduled runs and of a workload's history."""
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from benchmarks import charts, history, schedules, selectors
from benchmarks.decorators import hides_addresses, permalink
from benchmarks.engine import catalogue
from benchmarks.forms import AlertSettingsForm, ScheduleForm
from benchmarks.models import LevelResult
from benchmarks.views import _check_format, _figure_response


# ---------------------------------------------------------------- schedules
@login_required
@require_POST
def run_schedule(request, public_id: str):
    """"Repeat this run on a schedule": the run's settings, saved with when to repeat them."""
    run = selectors.run_by_public_id(public_id)
    if not schedules.may_repeat(run, request.user):
        raise PermissionDenied(schedules.NOT_YOURS)
    form = ScheduleForm(request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            label = form.fields[field].label or field if field in form.fields else ""
            messages.error(request, f"Not scheduled: {label + ': ' if label else ''}{' '.join(errors)}")
        return redirect(f"{run.get_absolute_url()}#schedule")
    schedule = schedules.schedule_create(
        owner=request.user, name=form.cleaned_data["name"] or str(run), template=schedules.template_from_run(run),
        **form.schedule_fields())
    messages.success(request, f"Scheduled: {schedule.when}.")
    return redirect(schedule)


@login_required
def schedule_list(request):
    return render(request, "benchmarks/schedule_list.html", {"schedules": selectors.schedules_of(request.user),
                                                             "pause_after": settings.SCHEDULE_PAUSE_AFTER_FAILURES})


@login_required
def schedule_detail(request, public_id: str):
    schedule = selectors.schedule_for(request.user, public_id)
    form = AlertSettingsForm(request.POST or None, initial={"alert_emails": schedule.alert_emails,
                                                             "webhook_url": schedule.webhook_url})
    if request.method == "POST" and form.is_valid():
        schedules.alerts_update(schedule=schedule, alert_emails=form.cleaned_data["alert_emails"],
                                webhook_url=form.cleaned_data["webhook_url"],
                                webhook_secret=form.cleaned_data["webhook_secret"],
                                clear_secret=form.cleaned_data["clear_secret"])
        messages.success(request, "Alert settings saved.")
        return redirect(schedule)
    return render(request, "benchmarks/schedule_detail.html", {
        "schedule": schedule, "runs": selectors.schedule_runs(schedule), "form": form,
        "endpoints": schedules.template_endpoints(schedule.template),
        "alerts": schedule.alerts.select_related("run").order_by("-created")[:50]})


@login_required
@require_POST
def schedule_action(request, public_id: str, action: str):
    schedule = selectors.schedule_for(request.user, public_id)
    if action == "pause":
        schedules.schedule_pause(schedule=schedule, reason=f"Paused by {request.user.get_username()}.")
        messages.info(request, "Paused: no run is queued until you resume it.")
    elif action == "resume":
        schedules.schedule_resume(schedule=schedule)
        messages.success(request, f"Resumed: {schedule.when}.")
    elif action == "delete":
        schedules.schedule_delete(schedule=schedule)
        messages.info(request, f"Schedule “{schedule.name}” deleted; the runs it queued stay.")
        return redirect("schedule-list")
    else:
        raise Http404("No such action.")
    return redirect(schedule)


# ---------------------------------------------------------------- history
def _history_or_404(fingerprint: str) -> dict:
    description = history.history_description(fingerprint)
    if description is None:
        raise Http404("No finished run has this workload.")
    return description


@permalink
def history_page(request, fingerprint: str):
    description = _history_or_404(fingerprint)
    hide = hides_addresses(request)
    levels = LevelResult.objects.filter(fingerprint=fingerprint).select_related("endpoint")
    blank = selectors.address_hider({lv.endpoint for lv in levels}, hide)
    points = history.history_points(fingerprint, blank=blank, hide_flags=hide)
    return render(request, "benchmarks/history.html", {
        "fingerprint": fingerprint, "description": description, "points": list(reversed(points)),
        "figures": catalogue.HISTORY_FIGURES, "thresholds": history.thresholds(),
        # A chart for each figure some run measured: no empty energy chart where no GPU was read.
        "chart_list": [(f.name, f.metric.name) for f in catalogue.HISTORY_FIGURES
                       if any(p["figures"][f.name] is not None for p in points)]})


@permalink
def history_chart(request, fingerprint: str, name: str, fmt: str):
    _check_format(fmt)
    _history_or_404(fingerprint)
    shown = next((f for f in catalogue.HISTORY_FIGURES if f.name == name), None)
    if shown is None:
        raise Http404("No such chart of a history.")
    levels = LevelResult.objects.filter(fingerprint=fingerprint).select_related("endpoint")
    hide = hides_addresses(request)
    blank = selectors.address_hider({lv.endpoint for lv in levels}, hide)
    fig = charts.history_figure(shown, history.history_points(fingerprint, blank=blank, hide_flags=hide))
    return _figure_response(fig, fmt, f"history-{fingerprint}-{name}")
