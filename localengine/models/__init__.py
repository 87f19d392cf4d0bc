"""Model definitions (the tensor plane)."""
