"""``agentbus notifier``: push a device's chosen events to its webhook."""
