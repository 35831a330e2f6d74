"""Frontend passes: read user source (parse) and reject what is unsupported (fence)."""
