"""Small helpers every layer may use (they import nothing of the project but its errors):
lazy package exports, options checked by name, sync wrappers over the async API."""
