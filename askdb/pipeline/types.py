"""The core's shared types, now in `core.types` (below infra and the apps); re-exported here so
the stages' imports keep working until the stages move to `core/` too (MOVE_CORE.md)."""

from core.types import (
    CatalogSchema,
    ChatModel,
    ChatResult,
    ColumnContext,
    ExampleContext,
    LLMError,
    TableContext,
    TableSchema,
    ValidatedSql,
)

__all__ = [
    "CatalogSchema",
    "ChatModel",
    "ChatResult",
    "ColumnContext",
    "ExampleContext",
    "LLMError",
    "TableContext",
    "TableSchema",
    "ValidatedSql",
]
