"""launch: hosts -> probe -> plan -> supervise. `ddpkit launch`, and what `demo` and `bench` run
through. The only modules that start processes or open SSH sessions are remote, supervise and
agents (proc runs short local commands for the doctor)."""
