"""verify: the cluster preflight (`check`), the sanity job (`demo`) and `bench`; they build on
the launcher, never the other way round."""
