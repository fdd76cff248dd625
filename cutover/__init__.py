"""stream-osc: cutover."""
