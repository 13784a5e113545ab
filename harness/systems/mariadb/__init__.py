"""Debian's MariaDB: one server, a primary with binlog replicas, or a Galera cluster (--flag topology=).

MariaDB under test: its deployment and its SQL client, for Jepsen's MySQL and Galera analyses.
"""
