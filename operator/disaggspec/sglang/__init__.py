"""SGLang knowledge: per-version flag profiles (this package) and, later, server-args rendering."""
