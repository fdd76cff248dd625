"""stream-osc: streams."""
