"""Quad's deploy tools where bash would strain: JSON, YAML, scheduling (`python3 -m quaddeploy.kube`, `.metrics`, `.services`)."""
