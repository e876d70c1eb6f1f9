"""The pytest plugin of the compatibility matrix (placeholder until the matrix lands)."""
