"""Shared test fakes and harnesses, registered as plugins in tests/conftest.py."""
