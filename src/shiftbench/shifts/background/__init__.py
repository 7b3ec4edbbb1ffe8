"""background shifts (registered on import)."""
