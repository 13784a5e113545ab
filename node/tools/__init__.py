"""Admin and development tools built on the engine."""
