"""Video and image models, built by name from a recipe's model section: ``cards`` (each name's published input,
without torch), ``slowfast_spec`` (a SlowFast's settings, without torch), ``builder`` (the model itself)."""
