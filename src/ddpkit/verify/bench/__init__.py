"""ddpkit bench: nccl-tests' measurements and table, from the torch already installed."""
