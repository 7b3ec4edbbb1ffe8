"""Model adapters and task protocols (registered on import; heavy backends lazily)."""
