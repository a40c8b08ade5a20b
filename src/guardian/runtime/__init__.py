"""Running rules: the collector, the executor (the one path to ``apply()``), config,
persisted state, recordings and replay, metrics, holds and what the CLI and the service
share."""
