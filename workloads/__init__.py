"""Workloads: clients, op generators and the models their histories are checked against."""
