"""retrieval shifts (registered on import)."""
