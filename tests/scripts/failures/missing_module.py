"""Imports a module that is not installed (an old test helper)."""
import mock  # noqa: F401
