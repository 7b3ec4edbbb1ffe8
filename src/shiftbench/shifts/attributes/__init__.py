"""attributes shifts (registered on import)."""
