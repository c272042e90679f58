"""The schema catalog: clinical sources and their curated table and column documentation."""
