"""`python -m peertrain …` is the `peertrain` command."""

from peertrain.node.cli.main import main

raise SystemExit(main())
