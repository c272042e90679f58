"""askdb's write use cases, one module per concept. Views, tasks, the API and commands import
the function they call from its module (askdb.services.runs, .reviews, .examples, …)."""
