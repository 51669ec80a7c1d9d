"""Contract suite of the log's read side; one subclass per backend."""
