"""The audit log: an append-only table, the service that writes to it, and the middleware that
tells it who made the request. Every app records through `infra.audit.services.audit_record`."""
