"""The tablet server daemon."""
