"""Tessera under test: its deployment, clients, membership changes and end checks."""
