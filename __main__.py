"""`python -m peertrain …` is the `peertrain` command."""

from peertrain.node.cli import main

raise SystemExit(main())
