"""`ddpkit setup ...`: the guides' manual set-up work, one module per target."""
