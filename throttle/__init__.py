"""stream-osc: throttle."""
