"""Quad's deploy tools where bash would strain: JSON, YAML, scheduling."""
