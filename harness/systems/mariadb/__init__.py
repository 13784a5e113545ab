"""Debian's MariaDB: one server, binlog replicas or Galera (--flag topology=); SQL list-append, rw-register, bank.

MariaDB under test: its deployment and its SQL client, for Jepsen's MySQL and Galera analyses.
"""
