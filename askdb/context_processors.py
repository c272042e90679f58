"""Values every template needs: the user's role and whether an LLM is configured."""

from askdb import health
from askdb.roles import user_role
from askdb.selectors_requests import inbox_unread_count


def askdb(request) -> dict:
    user = getattr(request, "user", None)
    return {"role": user_role(user), "llm_configured": health.llm_configured(),
            "inbox_unread": inbox_unread_count(user=user) if user is not None else 0}  # fmt: skip
