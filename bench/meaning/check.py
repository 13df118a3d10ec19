"""Check the meaning dev set: paraphrased questions share no content word with their note.

    python bench/meaning/check.py

Every ``paraphrase`` question of ``questions.jsonl`` is compared with its note after
lower-casing, dropping stop words and stemming (a conservative suffix stemmer: two words
count as shared when their stems are equal or one stem of 4+ letters begins the other, so
"physio"/"physiotherapist" is caught though a Porter stemmer would not conflate them).
Every distractor must share at least one content word with some question. ``keyword``
questions must share their rare token with their note (that is their point). Exits 1 with
one line per problem, so a set edited by hand cannot quietly lose its property.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

STOP = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves m s t d ll re ve don didn doesn isn wasn
get got go goes going much many often how what's i'm we're it's let's also still e g
""".split())

_SUFFIXES = ("ational", "ations", "ation", "ement", "ments", "ment", "ness", "ings", "ing", "edly", "ies", "ied",
             "ers", "er", "est", "ed", "es", "ly", "s", "e", "y")
_WORD = re.compile(r"[a-z0-9]+")


def stem(word: str) -> str:
    for suf in _SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[: -len(suf)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":  # running -> run
        word = word[:-1]
    return word


def content_stems(text: str) -> dict[str, str]:
    """stem -> the word it came from, for the text's content words."""
    return {stem(w): w for w in _WORD.findall(text.lower().replace("'", " ")) if w not in STOP}


def shared(a: dict[str, str], b: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for sa, wa in a.items():
        for sb, wb in b.items():
            short, long_ = sorted((sa, sb), key=len)
            if sa == sb or (len(short) >= 4 and long_.startswith(short)):
                out.append((wa, wb))
    return out


def note_text(path: Path) -> str:
    """A daily file's note: the lines after its ``# date`` heading."""
    return "\n".join(ln for ln in path.read_text(encoding="utf-8").splitlines() if not ln.startswith("#"))


def load(root: Path = HERE) -> list[dict]:
    return [json.loads(ln) for ln in (root / "questions.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip()]


def problems(root: Path = HERE) -> list[str]:
    qs = load(root)
    ws = root / "workspace"
    notes = {f"memory/{p.name}": note_text(p) for p in sorted((ws / "memory").glob("*.md"))}
    out: list[str] = []
    answered = set()
    for q in qs:
        if q["path"] not in notes:
            out.append(f"{q['id']}: no note at {q['path']}")
            continue
        answered.add(q["path"])
        both = shared(content_stems(q["question"]), content_stems(notes[q["path"]]))
        if q["kind"] == "paraphrase" and both:
            out.append(f"{q['id']}: {q['question']!r} shares {both} with {q['path']}")
        elif q["kind"] == "keyword" and not both:
            out.append(f"{q['id']}: keyword question {q['question']!r} shares nothing with {q['path']}")
    q_stems = [content_stems(q["question"]) for q in qs]
    distractors = [p for p in notes if p not in answered]
    for p in distractors:
        if not any(shared(s, content_stems(notes[p])) for s in q_stems):
            out.append(f"{p}: distractor shares no word with any question")
    kinds = [q["kind"] for q in qs]
    if kinds.count("paraphrase") < 60:
        out.append(f"only {kinds.count('paraphrase')} paraphrased questions (at least 60)")
    if len(distractors) < 60:
        out.append(f"only {len(distractors)} distractor notes (at least 60)")
    return out


def main() -> int:
    bad = problems()
    for line in bad:
        print(f"meaning set: {line}", file=sys.stderr)
    if bad:
        return 1
    qs = load()
    print(f"meaning set OK: {sum(q['kind'] == 'paraphrase' for q in qs)} paraphrased, "
          f"{sum(q['kind'] == 'keyword' for q in qs)} keyword questions, "
          f"{len(list((HERE / 'workspace' / 'memory').glob('*.md'))) - len(qs)} distractors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
