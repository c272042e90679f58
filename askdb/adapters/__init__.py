"""askdb's adapters: the core's ports and recorder over Django, and the library cache. Below the
services (they import none), above the models."""
