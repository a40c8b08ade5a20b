"""Rule files: schema, TOML loading with file:line:col errors, and the expression compiler."""
