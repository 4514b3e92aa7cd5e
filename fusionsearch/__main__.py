"""`python -m fusionsearch` runs the CLI."""

from fusionsearch.cli import main

raise SystemExit(main())
