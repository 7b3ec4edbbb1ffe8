"""Engines: generate shifted datasets, evaluate models, store results."""
