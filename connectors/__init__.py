"""stream-osc: connectors."""
