"""The Triton sampling path."""
