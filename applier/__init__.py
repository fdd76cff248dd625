"""stream-osc: applier."""
