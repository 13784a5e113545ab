"""PySyncObj under test: its deployment, and the node program every host runs (`node`)."""
