"""agentbus services: one sub-package per process role."""
