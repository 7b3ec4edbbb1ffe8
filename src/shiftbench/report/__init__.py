"""Reports built from the results store alone."""
