"""Metrics: stateful update/compute classes over pure functions (registered on import)."""
