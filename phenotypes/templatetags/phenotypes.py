"""Evidence with its matched term highlighted; the text is escaped, only the <mark> is ours."""

from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

register = template.Library()


@register.filter
def highlight(evidence: dict) -> str:
    text = evidence.get("text", "")
    start, end = (evidence.get("term") or [0, 0])[:2]
    if not text or not 0 <= start < end <= len(text):
        return escape(text)
    return mark_safe(
        f'{escape(text[:start])}<mark class="assertion-{escape(evidence.get("assertion", ""))}">'
        f"{escape(text[start:end])}</mark>{escape(text[end:])}"
    )
