"""Built-in sources, one module each; they register through ``guardian.sources``."""
