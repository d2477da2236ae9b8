from django import template

register = template.Library()


@register.filter
def div1024(value):
    """MiB -> GiB for display."""
    return None if value in (None, "") else value / 1024


@register.filter
def shown(point, figure):
    """A point's figure (engine.catalogue.Figure) as the catalogue shows it: its decimals and unit
    scale, "—" when not measured or not stated."""
    value = point.get(figure)
    m = figure.metric
    return "—" if value is None else f"{value * m.scale:.{m.digits}f}"


@register.filter
def breakable(code: str):
    """A flag code that may wrap after its underscores (coordinated_omission in a narrow column)."""
    from django.utils.html import escape
    from django.utils.safestring import mark_safe
    return mark_safe(escape(code).replace("_", "_<wbr>"))
