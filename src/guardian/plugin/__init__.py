"""The plugin seams: the Source/Action contract, the registry, secrets and who may never
be a target."""
