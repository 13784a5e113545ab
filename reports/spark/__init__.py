"""`tessera analyze`: the Spark job that checks many stored runs in parallel (see `job`)."""
