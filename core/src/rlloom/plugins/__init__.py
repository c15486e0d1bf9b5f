"""Plugin machinery: hook specs (the public plugin API) and the registry that loads entry points."""
