"""troubleshoot: what went wrong (`diagnose`), where it hangs (`stacks`), what will go wrong
(`lint`)."""
