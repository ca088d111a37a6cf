from .run.cli import main

raise SystemExit(main())
