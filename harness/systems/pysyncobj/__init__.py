"""A PySyncObj replicated store: register and set, node-bound clients.

PySyncObj under test: its deployment, and the node program every host runs (`node`).
"""
