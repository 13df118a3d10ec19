"""Long-running servers for agent runtimes that cannot call memindex in-process.

``tools`` holds the three operations (search, get, status) every transport
serves; ``mcp`` puts them on the official MCP SDK (stdio and streamable HTTP),
``http`` on a small JSON API. Both need the ``serve`` extra (the ``mcp`` SDK,
which brings Starlette and uvicorn).
"""

from memindex.pipeline.config import environ

# Here, not in ``http``, so the CLI can show them without importing the web stack.
TOKEN_ENV = environ.TOKEN.name
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8377
