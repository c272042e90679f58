"""Values every template needs: the user's role and whether an LLM is configured."""

from askdb import health
from askdb.roles import user_role


def askdb(request) -> dict:
    return {"role": user_role(getattr(request, "user", None)), "llm_configured": health.llm_configured()}
