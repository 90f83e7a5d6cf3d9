"""Graph topology."""
