"""stream-osc: stack."""
