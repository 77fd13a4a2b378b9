"""What a run leaves behind in its directory: manifest.json, the atomic exports and the space reserve,
the README and plots, and the lock that keeps one run per directory."""
