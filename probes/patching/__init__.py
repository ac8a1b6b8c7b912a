"""Causal (activation) patching for encoders: clean -> corrupted, per layer x position and per head."""
