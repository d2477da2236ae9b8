from django import template

register = template.Library()


@register.filter
def div1024(value):
    """MiB -> GiB for display."""
    return None if value in (None, "") else value / 1024
