"""Quad's deploy tools that outgrew bash: `python3 -m quaddeploy.kube`."""
