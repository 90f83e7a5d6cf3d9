"""Feature stores."""
