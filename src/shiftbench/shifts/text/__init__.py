"""text shifts (registered on import)."""
