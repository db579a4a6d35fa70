"""prepare: is this machine ready (`doctor`, `checks/`) and the set-up work (`setup/`)."""
