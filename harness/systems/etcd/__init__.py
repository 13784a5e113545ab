"""Debian's etcd-server, one member per host, through etcd's v3 JSON gateway.

etcd under test: its deployment and its client.
"""
