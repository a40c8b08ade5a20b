"""Built-in actions. Each registers through the ``guardian.actions`` entry point."""
