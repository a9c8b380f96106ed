"""One text module (issue 22, item 4): session recall, long-term memory, skill evolution and
the offline planner read words through sessions_app.core.text."""

from __future__ import annotations

import pytest

from sessions_app.core import memory, recall, text


@pytest.mark.parametrize(
    "sample",
    [
        "Caroline's painting of the sunrise, and the sunrises she painted",
        "Она живёт в Москве с 2019 года",
        "東京タワーに行きました",
        "ภาษาไทย และ 한국어",
        "café crème, naïve résumé; a_b v1.2 x@y.com",
    ],
)
def test_recall_and_memory_analyze_a_text_alike(sample: str) -> None:
    assert recall.analyze(sample) == text.analyze(sample)
    assert memory.analyze(sample) == text.analyze(sample)


def test_memory_reads_words_in_any_script_and_full_width_forms_as_ascii() -> None:
    assert "москв" not in memory.analyze("Москве")  # non-ASCII words are not stemmed
    assert memory.analyze("Она живёт в Москве") == ["она", "живёт", "в", "москве"]
    assert memory.analyze("café") == ["café"]
    assert memory.analyze("ＡＢＣ１２３ painted") == ["abc123", "paint"]
    assert recall.analyze("ＡＢＣ１２３") == ["ａｂｃ１２３"]  # recall's PostgreSQL index reads the text as written


def test_one_stop_word_list_for_every_search() -> None:
    assert recall.STOP_WORDS is text.STOP_WORDS
    assert text.STOP_WORDS == text.FUNCTION_WORDS | text.QUERY_WORDS
    question = "What did we discuss about the session with them?"
    assert memory.analyze(question) == recall.analyze(question) == []
    assert recall.query_terms(question)  # a query of stop words alone keeps them


def test_bm25_saturates_with_repeats_and_falls_with_length() -> None:
    weight = text.idf(100, 3)
    assert weight > text.idf(100, 30) > text.idf(100, 100) > 0
    once, twice, ten = (text.bm25_term(weight, tf, 10, 10) for tf in (1, 2, 10))
    assert once < twice < ten < weight * (text.BM25_K1 + 1)
    assert text.bm25_term(weight, 1, 40, 10) < once < text.bm25_term(weight, 1, 2, 10)
    assert text.bm25_term(weight, 0, 10, 10) == 0.0


def test_memory_and_recall_rank_with_the_same_bm25() -> None:
    term = text.stem("tennis")
    entries = [
        memory.MemoryEntry(id=f"m{i}", app="demo", user_id="1", text=t)
        for i, t in enumerate(["tennis on weekends", "tennis"])
    ]
    candidates = [memory.Candidate(entry=e, tokens=tuple(memory.analyze(e.text))) for e in entries]
    stats = memory.CorpusStats(documents=10, average_length=2.0, document_frequency={term: 2})
    ranked = {entry.id: raw for entry, raw, _score in memory.bm25_rank([term], "", candidates, stats)}
    weight = text.idf(10, 2)
    assert ranked == {"m0": text.bm25_term(weight, 1, 2, 2.0), "m1": text.bm25_term(weight, 1, 1, 2.0)}
    document = recall.make_document("e1", "tennis")
    scored = recall.score_document(
        [term], "", document, recall.CorpusStats(doc_count=10, avg_length=12.0, doc_freq={term: 2})
    )
    assert scored is not None and scored.relevance == text.bm25_term(weight, 1, 6, 12.0)
