from ddpkit.cli.main import main

raise SystemExit(main())
