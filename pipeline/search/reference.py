"""Reference texts: "text in general" for a workspace too small to say what its model gives it.

Calibrated ranking (``ranking.cosine_background``) reads a chunk's cosine against what the index's
model gives text in general, learnt from a sample of the index's own chunks. A new user's workspace
of a few notes has fewer than ``ranking.MIN_BACKGROUND`` of them: without a background the raw
cosine is the evidence, and that fails both ways (MiniLM gives unrelated text ~0.08, so a paraphrase
often stays under minScore; e5 gives it ~0.77, so every note passes minScore for any question).

These texts stand in for the missing chunks: short memory-note-like lines on unrelated everyday
topics, written for this purpose (not taken from any benchmark set). The first index of a store
embeds them once per provider identity, as documents (the chunks' document prefix), through the
compute side like any chunk; the writer stores them only as ``embedding_cache`` rows, keyed by
their hashes (computed as chunk hashes are, so the cache lookup of the file side finds them). A
search whose sample holds fewer than ``MIN_BACKGROUND`` chunk vectors adds those rows to it
(``engine.MemorySearch._background``); nothing is embedded at search time.

Here, beside the ranking's background code, because what they are for is ranking; the record that
carries them to the writer is built here too so no actor assembles one by hand.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.chunking import sha256_hex
from memindex.pipeline.index.fingerprint import KEYWORD_ONLY, EmbeddingIdentity
from memindex.pipeline.index.records import ChunkRecord, FileRecord
from memindex.pipeline.search.ranking import MIN_BACKGROUND
from memindex.pipeline.store.reader import open_reader

if TYPE_CHECKING:  # (the type only: a search does not load the planner)
    from memindex.pipeline.index.indexer import SyncPlan

log = logging.getLogger("memindex.sync")

# Varied on purpose (work, code, travel, family, health, money, home, hobbies, plans, people,
# dates): a background must be what a query is *not* about, whatever the query is about.
REFERENCE_TEXTS: tuple[str, ...] = (
    "Standup moved to 9:45 on Tuesdays so the Berlin team can join before lunch.",
    "- Asked Priya to review the quarterly budget slides before Friday's board call.",
    "Renewed the car insurance; the premium went up 12% because of the windscreen claim.",
    "Mum's birthday is on 14 May. She would like a photo album of the grandchildren.",
    "The flaky integration test fails only when the cache warms up in parallel; pinned the seed for now.",
    "Booked the night train to Vienna, couchette in car 5, departing 21:10 from platform 3.",
    "Dr. Okafor said to cut back on coffee and come back in six weeks for the blood pressure check.",
    "## 2024-03-02\n- Planted tomatoes and basil in the raised bed by the fence.",
    "Kids' school closes early on the 20th for the teachers' training day.",
    "Migrated the invoicing service from Python 3.9 to 3.12; only the date parsing broke.",
    "Sourdough starter needs feeding twice a day while it lives on the counter.",
    "Gym plan: squats and rows on Monday, intervals on Wednesday, long walk at the weekend.",
    "Landlord agreed to fix the leaking bathroom tap by the end of the month.",
    "Tom prefers window seats and is allergic to peanuts; remember when ordering for the offsite.",
    "Paid the electricity bill late again. Set up a direct debit on the 1st.",
    "Idea for the blog: a short post on why we stopped using microservices for internal tools.",
    "Learning the guitar: the F barre chord still buzzes, practise the transition from C slowly.",
    "Passport expires in November; the renewal takes about eight weeks, so apply in August.",
    "The dog gets his worming tablet every three months, next one due in early July.",
    "Customer in Lyon reported the export button does nothing in Safari; could not reproduce on Chrome.",
    "Savings goal: 4,000 for the kitchen by December, 300 a month into the separate account.",
    "Grandad's stories about the shipyard would make a good recording before his memory fades.",
    "Rotated the API keys for the staging environment and updated the vault entries.",
    "Hiking trip in the Dolomites: book the mountain hut for the second night, it fills up fast.",
    "Neighbour's cat keeps coming in through the kitchen window; keep it shut at night.",
    "Sarah is starting a new job at the hospital in September and will move closer to town.",
    "The bike's rear brake pads are worn; the shop on Mill Street can do it on Saturday.",
    "Read half of the history of the Silk Road; the chapter on paper money was the best part.",
    "Team retro: too many meetings on Thursdays, agreed to make one of them asynchronous.",
    "Dentist said the filling can wait until the spring, but floss the back teeth more.",
    "Tax return needs the donation receipts and the home office costs from last year.",
    "Wedding anniversary dinner: the Italian place by the river, table for two at eight.",
    "Database backups were silently failing for a week because the disk filled up; added an alert.",
    "Garden shed roof needs new felt before the autumn rains.",
    "Promised to help Jonas move flat on the last Saturday of the month; borrow a van.",
    "Running total for the holiday: flights 620, hotel 890, car hire still to book.",
    "Noticed I sleep better on days without screens after ten in the evening.",
    "Code review note: prefer returning early over nested conditionals in the parser.",
    "Piano lessons for Mia on Wednesdays at 4, teacher asks for twenty minutes of practice a day.",
    "The heating engineer comes on Monday morning between 8 and 12 to service the boiler.",
    "Conference talk accepted for October; the abstract promised a live demo, keep it small.",
    "Ordered a replacement charger for the old laptop; the original one started to smell hot.",
    "Volunteered to run the book club in March; the pick is a short novel about a lighthouse keeper.",
    "Aunt Rosa is recovering well after the hip operation and hopes to walk without a stick soon.",
    "Stock portfolio is too heavy in tech; move some of it into a broad index fund next quarter.",
    "Meal prep for the week: lentil soup, roast vegetables and a big pot of rice.",
    "Photos from the beach weekend are on the external drive, folder named after the date.",
    "Reminder: the lease on the office ends in June, decide by April whether to renew.",
)

# Each text's hash, as a chunk's (chunking.sha256_hex of its text): the embedding cache's key.
REFERENCE_HASHES: tuple[str, ...] = tuple(sha256_hex(t) for t in REFERENCE_TEXTS)

# The record's source and name in logs (it is never a file: no files, chunks or FTS rows, and a
# dead letter holding it counts only its files: workers/failures.message_keys).
REFERENCE_SOURCE = "reference"
REFERENCE_PATH = "(reference texts)"


def reference_missing(cached: dict[str, list[float]]) -> bool:
    """Is any reference vector missing from ``cached`` (an embedding-cache lookup of ``REFERENCE_HASHES``)?"""
    return any(h not in cached for h in REFERENCE_HASHES)


def offer_reference(settings: AgentSettings, plan: SyncPlan) -> bool:
    """Should ``plan``, which indexes and deletes nothing (its senders ask only then: a plan with
    work sends the reference texts with its first group), send them alone
    (``SyncPlan.send_reference``: ``IndexFiles.reference`` with no jobs)? Looked at once per store state (noted in the no-change mark, whether they were found or
    are now sent: ``indexer.note_reference_checked``). True for a store of fewer than
    ``MIN_BACKGROUND`` files (more hold enough chunks for a background of their own, and are never
    read for this) whose live index has vectors and whose embedding cache lacks any of their
    vectors under its identity: a store indexed before they existed, or whose cache was pruned. Its
    search then ranks with them from that sync on, not from its next edit. Never with the cache off
    (they would not be stored), nor without a no-change mark to note the look in (an old store
    that cannot vouch for its rows)."""
    # lazy: the planner's module, for its no-change mark; a search (which loads this one) does not load the planner
    from memindex.pipeline.index.indexer import note_reference_checked, read_mark

    store = settings.store_path
    if plan.unchanged >= MIN_BACKGROUND or not settings.memory_search.cache.enabled:
        return False
    mark = read_mark(store)
    if mark is None or mark.get("referenceChecked"):
        return False
    try:
        reader = open_reader(settings)
    except Exception as exc:  # noqa: BLE001 - the sync plans and reports the store itself
        log.debug("reference texts of %s not checked: %s", settings.agent_id, exc)
        return False
    try:
        fp = reader.state().live_fingerprint or {}
        if fp.get("provider") in (None, KEYWORD_ONLY.provider):  # no index yet, or keyword-only
            return False
        # Under the live index's identity, as the search looks them up (its size is the query's).
        found = reader.cached_embeddings(str(fp.get("provider")), str(fp.get("model")), str(fp.get("providerKey")),
                                         None, REFERENCE_HASHES)
        missing = reference_missing(found)
    except Exception as exc:  # noqa: BLE001 - as above: a sync never fails on this look
        log.debug("reference texts of %s not checked: %s", settings.agent_id, exc)
        return False
    finally:
        reader.close()
    note_reference_checked(store)  # found or now sent: not looked at again in this state
    return missing


def reference_record(ident: EmbeddingIdentity | None) -> FileRecord:
    """The reference texts as a record for the compute side to embed and the writer to cache
    (``workers.wire.WriteReference``): one chunk per text, no vector yet, in ``ident``'s space."""
    chunks = [ChunkRecord(0, 0, h, t) for t, h in zip(REFERENCE_TEXTS, REFERENCE_HASHES)]
    return FileRecord(REFERENCE_SOURCE, REFERENCE_PATH, "", sha256_hex("\n".join(REFERENCE_HASHES)), 0, 0,
                      chunks=chunks, embedding=ident)
