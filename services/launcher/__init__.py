"""``agentbus up``: the whole stack on one machine, each service its own process."""
