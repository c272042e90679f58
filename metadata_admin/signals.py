"""What the catalog tells the apps built on it, without knowing them."""

from django.dispatch import Signal

# Sent (sender=ClinicalSource, source=<the source>) when a source's documentation or schema changed
# in a way that may break SQL written against it. askdb re-validates its example library on it.
catalog_changed = Signal()

# Sent (sender=ClinicalSource, source=<the source>) when a source's data was (re)loaded or its value
# index rebuilt: what a question can find in it may have changed. askdb reloads its values on it.
source_data_changed = Signal()

# Sent (sender=ClinicalSource, source=<the source>) after a source's docs were embedded (the worker's
# embedding task, `reembed`, `import_docs`, a source refresh): what depends on the docs' text and is
# computed from it, not while answering, is computed now. askdb embeds its gate's column docs on it.
docs_embedded = Signal()
