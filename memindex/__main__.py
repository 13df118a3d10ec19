"""``python -m memindex``: the same as the ``memindex`` console script."""

from memindex.producers.cli.main import main

raise SystemExit(main())
