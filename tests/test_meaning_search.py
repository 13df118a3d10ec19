"""Issue 41: search by meaning as well as by word, with any embedding model.

End to end through the real pipeline (sync -> chunk -> local GGUF embed -> writer) and
``MemorySearch`` at default settings, with both local models of ../shared/models; skipped
without llama-cpp-python or the model files. The fusion's pure parts are in test_ranking.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from memindex.pipeline.embeddings.providers.local import llama_available
from memindex.pipeline.embeddings.prefixes import Prefixes, family_prefixes, model_key, prefixes_for
from memindex.pipeline.search.engine import MemorySearch
from tests.conftest import GGUF, SHARED

E5 = SHARED / "models" / "multilingual-e5-small.Q4_0.gguf"
MODELS = {"minilm": GGUF, "e5": E5}


def _local(model: str, **extra: Any) -> dict[str, Any]:
    path = MODELS[model]
    if not llama_available() or not path.is_file():
        pytest.skip(f"llama-cpp-python or {path.name} is missing")
    return {"provider": "local", "local": {"modelPath": str(path)}, **extra}


def _top(agent, query: str, **kw: Any) -> list[dict[str, Any]]:
    eng = MemorySearch(agent.settings())
    try:
        return eng.search(query, **kw).as_dict()["results"]
    finally:
        eng.close()


# The five notes: MEMORY.md shares "home" with the question and answers nothing.
FIVE_NOTES = {
    "MEMORY.md": "# Memory\nHome network setup lives in memory/network.md\n",
    "memory/2026-02-05.md": "# 2026-02-05\nSet up AdGuard DNS at 192.168.10.2 for the home network\n",
    "memory/2026-02-06.md": "# 2026-02-06\nBought oat milk, eggs and coffee beans.\n",
    "memory/2026-02-07.md": "# 2026-02-07\nDentist moved my appointment to Thursday afternoon.\n",
    "memory/2026-02-08.md": "# 2026-02-08\nRead an article about advertisements in old newspapers.\n",
}


def test_the_note_that_answers_by_meaning_beats_one_sharing_a_word(agent) -> None:
    """"which machine filters ads for my home LAN": MEMORY.md (one word, "home") ranked above the
    AdGuard note that answers it (0.975 against 0.957) under the old calibrated fusion."""
    agent.memory_config(_local("minilm"))
    for rel, text in FIVE_NOTES.items():
        agent.write(rel, text)
    agent.index()
    res = _top(agent, "which machine filters ads for my home LAN")
    assert res and res[0]["path"] == "memory/2026-02-05.md", [(r["path"], r["score"]) for r in res]


KEYWORD_NOTES = {
    "memory/2026-03-01.md": "# 2026-03-01\nPaid invoice INV-20931 from the electrician (320 EUR) by transfer.\n",
    "memory/2026-03-02.md": "# 2026-03-02\nElectrician invoice from last year (INV-19877) still unpaid; chase it.\n",
    "memory/2026-03-03.md": "# 2026-03-03\nChrome showed ERR_SSL_PROTOCOL_ERROR on the staging site; the cert chain "
                            "was missing the intermediate.\n",
    "memory/2026-03-04.md": "# 2026-03-04\nSSL certificate for the blog renews automatically via Let's Encrypt; "
                            "no protocol errors so far.\n",
    "memory/2026-03-05.md": "# 2026-03-05\nThe staging site is slow in the mornings; the cache warms up by ten.\n",
    "memory/2026-03-06.md": "# 2026-03-06\nAsked the bank why the transfer to the plumber took three days.\n",
}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize(("query", "path"), [
    ("invoice INV-20931", "memory/2026-03-01.md"),
    ("what fixed ERR_SSL_PROTOCOL_ERROR", "memory/2026-03-03.md"),
])
def test_an_exact_id_or_error_string_finds_its_note_first(agent, model: str, query: str, path: str) -> None:
    agent.memory_config(_local(model))
    for rel, text in KEYWORD_NOTES.items():
        agent.write(rel, text)
    agent.index()
    res = _top(agent, query)
    assert res and res[0]["path"] == path, [(r["path"], r["score"]) for r in res]


def test_e5_embeds_with_its_prefixes_and_changing_them_re_embeds(agent) -> None:
    """The e5 GGUF gets "query: "/"passage: " from the family table; an override is part of the
    provider's fingerprint, so the index is rebuilt instead of mixing vectors."""
    from memindex.pipeline.embeddings.embedder import identity_for, reset_services

    agent.memory_config(_local("e5"))
    agent.write("memory/2026-03-01.md", KEYWORD_NOTES["memory/2026-03-01.md"])
    assert agent.index()["to_index"] == 1
    with_prefixes = identity_for(agent.settings()).provider_key
    agent.memory_config(_local("e5", queryPrefix="", documentPrefix=""))
    reset_services()
    assert identity_for(agent.settings()).provider_key != with_prefixes
    assert agent.index()["to_index"] == 1  # re-embedded under the new fingerprint


def test_the_prefix_table_and_its_override() -> None:
    assert model_key("/m/multilingual-e5-small.Q4_0.gguf") == "multilingual-e5-small"
    assert model_key("nomic-embed-text:v1.5") == "nomic-embed-text"
    assert family_prefixes("/m/multilingual-e5-small.Q4_0.gguf") == Prefixes("query: ", "passage: ")
    assert family_prefixes("nomic-embed-text:latest") == Prefixes("search_query: ", "search_document: ")
    assert family_prefixes("embeddinggemma:300m").query.startswith("task: search result")
    assert family_prefixes("BAAI/bge-small-en-v1.5").document == ""
    assert not family_prefixes("all-MiniLM-L6-v2.F16.gguf")
    assert not family_prefixes("text-embedding-3-small")
    assert not family_prefixes("intfloat/e5-mistral-7b-instruct")  # an instruction model, not the markers
    assert prefixes_for("e5-base-v2", {"queryPrefix": ""}) == Prefixes("", "passage: ")
    assert prefixes_for("all-minilm", {"queryPrefix": "q: ", "documentPrefix": None}) == Prefixes("q: ", "")


def test_the_meaning_dev_set_keeps_its_property(tmp_path) -> None:
    """bench/meaning/check.py: paraphrases share no content word with their note, every distractor
    shares one with some question; and a question that shares one is reported."""
    import importlib.util
    import shutil

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("meaning_check", REPO / "bench" / "meaning" / "check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.problems() == []
    shutil.copytree(REPO / "bench" / "meaning", tmp_path / "m")
    qs = (tmp_path / "m" / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    first = next(q for q in check.load(tmp_path / "m") if q["kind"] == "paraphrase")
    note = check.note_text(tmp_path / "m" / "workspace" / first["path"])
    word = max(check.content_stems(note).values(), key=len)
    (tmp_path / "m" / "questions.jsonl").write_text("\n".join(
        q.replace(first["question"], f"{first['question']} {word}") for q in qs) + "\n", encoding="utf-8")
    assert any(first["id"] in p and word in p for p in check.problems(tmp_path / "m"))
