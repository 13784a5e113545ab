"""The replicated tablet store of this project: every workload, client mode and fault.

Tessera under test: its deployment, clients, membership changes and end checks.
"""
