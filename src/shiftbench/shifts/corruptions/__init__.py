"""corruptions shifts (registered on import)."""
