"""Conditioning: mask providers, captioners, prompt sets."""
