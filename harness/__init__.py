"""The chaos harness: clusters over SSH, the op generator, the runner and the `tessera` CLI."""
