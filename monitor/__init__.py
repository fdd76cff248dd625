"""stream-osc: monitor."""
