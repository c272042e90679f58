"""askdb's framework-free core: no Django, no openai, no Celery (import-linter contracts in
pyproject.toml). Today it holds the types shared by the stages and the infrastructure; the stages
themselves (core/) move here next (MOVE_CORE.md).
"""
