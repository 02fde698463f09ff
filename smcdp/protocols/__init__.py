"""Transport-agnostic protocols: one module per protocol, roles as coroutines."""
