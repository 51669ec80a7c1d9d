"""Pytest plugins with fixtures shared across rooms (listed in tests/conftest.py)."""
