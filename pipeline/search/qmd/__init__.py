"""QMD backend (F15): the external ``qmd`` CLI as the search engine.

``runner`` executes qmd in the agent's own XDG home, ``collections`` names and
sets up qmd collections, ``parse`` turns qmd's JSON into ``SearchResult``s,
``manager`` ties them together (update/embed, search), ``sessions_export``
writes sanitized transcripts for the sessions collection.
"""
