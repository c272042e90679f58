"""Shared infrastructure that no app owns: providers (embeddings, LLM), adapters (clinical
executors, catalog search), the labelled-file reader and the audit log (`infra.audit`, the one
Django app in here, because the audit log is a table). Imports only `core` (the
framework-free core), third-party packages and Django, never an app above it.
"""
