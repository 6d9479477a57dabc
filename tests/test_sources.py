"""The two write-ups, named once: the shorthand the code cites finds its write-up, and every write-up says what a
reader needs (title, authors, date, what it covers)."""

from lanebook.recipe.sources import CANARY, RECIPE, SHORTHAND, WRITE_UPS, cited


def test_the_shorthand_finds_its_write_up_however_it_is_spelt():
    text = "seed 000 (the recipe), Seed 003's table, seed 0001 and seeds"
    assert [cited(m) for m in SHORTHAND.finditer(text)] == [RECIPE, CANARY]


def test_every_write_up_names_itself_for_a_reader():
    assert RECIPE.title == "Flash-0731 on 2× DGX Spark: current recipe and honest speed"
    assert "James Meadlock & Milo" in RECIPE.authors and "July 31, 2026" in RECIPE.dated
    assert "July 29, 2026" in CANARY.dated
    for w in WRITE_UPS:
        assert w.title and w.short_title and w.covers and w.anchor
        assert not SHORTHAND.search(w.covers + w.title + w.authors)  # a reader is never given the shorthand
