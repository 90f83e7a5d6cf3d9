"""Process groups."""
