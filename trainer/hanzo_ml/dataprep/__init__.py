"""Dataset preparation: reading sources, the preparation operations and the prepare-dataset command."""
