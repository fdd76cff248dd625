"""stream-osc: migration."""
