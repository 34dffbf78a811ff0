"""Names in a text (services.core.terms.entities): capitals that say something, in prose and in markdown."""

from hypothesis import given
from hypothesis import strategies as st

from services.core.terms import entities

MARKDOWN_REPLY = (
    "Great question! 😊 Here are some options:\n\n### Top picks\n\n1. **Eero Pro 6E** – fast\n"
    "2. **TP-Link Deco XE75** – great value\n\n> **Tip:** place one node per floor.\n\n"
    "- **Step 1:** Download the Deco app\n- **Step 2:** Plug in the main unit\n\nHope this helps! ✨"
)


def test_names_mid_sentence_count_and_sentence_openers_do_not() -> None:
    assert entities("I met Alice in Paris.") == ["Alice", "Paris"]
    assert entities("Paris Hilton was there.") == ["Hilton"]  # as ever: a sentence's first word is dropped
    assert entities("I visited two cities: Paris and Rome.") == ["Paris", "Rome"]
    assert entities("Thanks!  Nate said so.") == []


def test_line_starts_list_items_bold_labels_and_emoji_do_not_make_names() -> None:
    found = entities(MARKDOWN_REPLY)
    assert "Deco" in found
    # A list item's first word goes as every line's does: "**TP-Link Deco XE75**" keeps "Deco".
    assert "Pro" in found
    for opener in ("Here", "Top", "Tip", "Step", "Download", "Plug", "Hope"):
        assert opener not in found, found


def test_a_quoted_title_is_a_name_even_where_a_sentence_starts() -> None:
    assert entities('Glad you liked it! "The Alchemist" is worth it.') == ["The Alchemist"]


def test_names_in_any_script_hyphens_and_apostrophes_are_whole() -> None:
    text = "Day 2 Belém, then São Paulo with Jean-Luc Picard, O'Brien and LeBron; Anna's bag, TikTok and Spider-Man."
    assert entities(text) == [
        "Belém",
        "São Paulo",
        "Jean-Luc Picard",
        "O'Brien",
        "LeBron",
        "Anna",
        "TikTok",
        "Spider-Man",
    ]
    # A clitic ends a name: "Charlotte's Web" is two, and "You're" is "You".
    assert entities("We read Charlotte's Web, and I said You're right.") == ["Charlotte", "Web", "You"]
    # Part of a word is no word: "7-Eleven" names no "Eleven", "l'Orangerie" no "Orangerie".
    assert entities("Cash from the 7-Eleven by l'Orangerie, said Anna.") == ["Anna"]


def test_code_names_nothing() -> None:
    reply = "Use **Flask-JWT-Extended**; `None` means no `Content-Type` header.\n\n```python\nOrder.query.all()\n```\nAsk Maria."
    assert entities(reply) == ["Flask-JWT-Extended", "Maria"]


def test_a_name_does_not_run_on_across_lines() -> None:
    assert entities("We flew with Lufthansa\nBoston was next") == ["Lufthansa"]


@given(st.text(alphabet=st.sampled_from(list('AaBb Cc.!?:*-#\n"😊1')), max_size=60))
def test_every_name_is_a_phrase_of_the_text(text: str) -> None:
    for name in entities(text):
        assert name
        assert name in text
