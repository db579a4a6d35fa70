"""Imported by exit_semantics.py: a module beside the script must be importable."""
WHERE = "sibling module"
