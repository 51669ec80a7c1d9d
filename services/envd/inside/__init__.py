"""Modules placed inside a sandbox (stdlib only; they run on the sandbox's python3)."""
