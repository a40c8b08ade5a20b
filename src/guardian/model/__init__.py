"""The types the engine evaluates: compiled rules and conditions, and the runtime
functions compiled conditions call. The policy layer compiles rule files into them."""
