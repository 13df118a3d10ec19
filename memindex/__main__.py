"""``python -m memindex``: the same as the ``memindex`` console script."""

from memindex.producers.cli.resident import main

raise SystemExit(main())
