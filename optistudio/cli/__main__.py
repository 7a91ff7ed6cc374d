"""`python -m optistudio.cli`: the same command line as `optistudio`."""

from optistudio.cli import main

raise SystemExit(main())
