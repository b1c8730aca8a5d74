"""The tokenizer every layer reads text with (``common.tokenizer``): words of every script, pinned language
by language; the same tokens as the old ASCII tokenizer on ASCII text; and what the rest of the code does
with it (a text without a token is rejected, a bundle embeds with its own tokenizer version, vocabulary
coverage)."""

from __future__ import annotations

import pytest

from common.tokenizer import TOKENIZER_VERSION, TOKENIZERS, ascii_words, tokenize, tokenizer_for
from data_recipes import build_recipe
from data_recipes.validate import validate_records
from pipeline.steps.text import vocabulary_coverage

LANGUAGES = {
    "German": ("München Straße café", ["münchen", "strasse", "café"]),
    "German, upper case": ("MÜNCHEN STRASSE", ["münchen", "strasse"]),
    "French": ("L'Élysée a reçu «le président» à Noël", ["l'élysée", "a", "reçu", "le", "président", "à", "noël"]),
    "Spanish": ("¿Dónde está el niño? ¡Año nuevo!", ["dónde", "está", "el", "niño", "año", "nuevo"]),
    # casefold keeps the dot of İ as a combining mark (i + U+0307); dotless ı stays ı: both words survive whole
    "Turkish": ("İstanbul ışık", ["i\u0307stanbul", "ışık"]),
    "Russian": ("Президент США", ["президент", "сша"]),
    "Greek": ("Η Αθήνα και ο Σωκράτης", ["η", "αθήνα", "και", "ο", "σωκράτησ"]),
    "Arabic": ("الرئيسُ الأمريكي في 2020", ["الرئيسُ", "الأمريكي", "في", "2020"]),
    # the vowel signs and the virama are combining marks: they stay inside their word
    "Hindi": ("हिन्दी समाचार", ["हिन्दी", "समाचार"]),
    "Chinese": ("東京都的新聞", ["東", "京", "都", "的", "新", "聞"]),
    "Japanese": ("今日は東京へ。カタカナ", ["今", "日", "は", "東", "京", "へ", "カ", "タ", "カ", "ナ"]),
    "emoji only": ("🎉🎉 👍 !!!", []),
    "mixed scripts": ("Mixed English и русский 東京2020", ["mixed", "english", "и", "русский", "東", "京", "2020"]),
    "full-width and circled": ("ＡＢＣ ① ²", ["abc", "1", "2"]),
    "typographic apostrophe": ("don’t stop", ["don't", "stop"]),
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_words_of_every_script(language):
    text, expected = LANGUAGES[language]
    assert tokenize(text) == expected


def test_the_issues_examples():
    assert tokenize("München Straße café") == ["münchen", "strasse", "café"]
    assert tokenize("Президент США") == ["президент", "сша"]
    assert len(tokenize("東京都")) == 3


ASCII_CASES = [
    "don't stop the state-run rock'n'roll",
    "snake_case and CamelCase, 2020-11-25; e-mail: a.b@c.d",
    "  TABS\tand\nnewlines  ",
    "it's 5 o'clock'",
    "'quoted' \"double\" (brackets) [x] {y} #tag $100 50% a&b",
    "",
]


@pytest.mark.parametrize("text", ASCII_CASES)
def test_ascii_text_gets_the_old_tokens(text):
    assert tokenize(text) == ascii_words(text)


def test_every_embedded_text_gets_the_old_tokens(tmp_path):
    """The embedded dataset is ASCII: the demo's tokens, and so its results, do not move."""
    texts = build_recipe("embedded", None, tmp_path, n_pairs=2000, image_size=16).manifest["text"]
    assert len(texts) == 2000 and all(text.isascii() for text in texts)
    assert [tokenize(t) for t in texts] == [ascii_words(t) for t in texts]


def test_versions():
    assert TOKENIZERS[str(TOKENIZER_VERSION)] is tokenize and tokenizer_for(TOKENIZER_VERSION) is tokenize
    with pytest.raises(KeyError, match="unknown tokenizer version '9'; available: 2"):
        tokenizer_for(9)


def test_a_text_without_a_token_is_rejected_and_counted():
    import pandas as pd

    manifest = pd.DataFrame(
        {
            "pair_id": ["a", "b", "c", "d"],
            "image_path": ["x.png"] * 4,
            "text": ["Президент США", "🎉🎉", "... !!!", "東京都"],
        }
    )
    kept, rejects = validate_records(manifest)
    assert kept["pair_id"].tolist() == ["a", "d"]
    assert rejects.set_index("pair_id")["reason"].to_dict() == {"b": "no_tokens", "c": "no_tokens"}


def test_vocabulary_coverage_by_hand():
    vocab = {"the": 2, "senate": 3}
    coverage = vocabulary_coverage([["the", "senate", "votes"], ["münchen", "stadt", "the"], []], vocab)
    # 6 tokens, 3 unknown; the second text is 2/3 unknown (> half), the first 1/3
    assert coverage == {"texts": 3, "tokens": 6, "unknown_token_share": 0.5, "mostly_unknown_text_share": 1 / 3}


def test_the_tokenizer_version_is_part_of_every_tokenising_tasks_output_path(monkeypatch, tmp_path):
    root = tmp_path / "runs"
    import luigi

    import pipeline.tasks.base
    from pipeline import PrepareShard, Train, TrainDoc2Vec, TrunkFeatures

    def signatures() -> dict[str, str]:
        luigi.task_register.Register.clear_instance_cache()  # fresh tasks: a task caches its signature
        tasks = [
            PrepareShard(profile="smoke", run_root=str(root)),
            TrainDoc2Vec(profile="smoke", run_root=str(root)),
            Train(profile="smoke", variant="ours", run_root=str(root)),
            TrunkFeatures(profile="smoke", backbone="efficientnet_lite0", image_size=32, run_root=str(root)),
        ]
        return {type(task).__name__: task.signature() for task in tasks}

    before = signatures()
    monkeypatch.setattr(pipeline.tasks.base, "TOKENIZER_VERSION", 99)
    after = signatures()
    assert all(before[name] != after[name] for name in ("PrepareShard", "TrainDoc2Vec", "Train"))
    # the trunk reads no text, but its input (the validated shard) depends on the tokenizer too
    assert before["TrunkFeatures"] != after["TrunkFeatures"]
