"""This project's replicated tablet store: every workload, client mode and fault.

Tessera under test: its deployment, clients, membership changes and end checks.
"""
