"""Status marks on the site are words in coloured boxes (no emoji font needed), also for older records' emoji."""

from lanebook.site.pages.markup import badge, badge_marks, md_table, outcome_badge, verdict_badge


def test_badges_are_words_with_a_class():
    assert badge("dry run", "dry-run") == '<span class="lanebook-badge lanebook-badge-dry-run">DRY RUN</span>'
    assert verdict_badge("pass") == '<span class="lanebook-badge lanebook-badge-pass">PASS</span>'
    assert verdict_badge("odd") == '<span class="lanebook-badge lanebook-badge-unknown">ODD</span>'
    assert outcome_badge("not observed") == '<span class="lanebook-badge lanebook-badge-dry-run">NOT OBSERVED</span>'
    assert badge("<x>", "a b") == '<span class="lanebook-badge lanebook-badge-a-b">&lt;X&gt;</span>'


def test_check_marks_become_badges_new_and_legacy():
    assert badge_marks("`PASS` **models** — ok\n`NOT OBSERVED` **log**") == (
        '<span class="lanebook-badge lanebook-badge-pass">PASS</span> **models** — ok\n'
        '<span class="lanebook-badge lanebook-badge-dry-run">NOT OBSERVED</span> **log**'
    )
    assert badge_marks("✅ **a**\n| 3 | ❌ fail | x |\n◻️ not observed\n⏭️ **s**\na ⚠️ warning here") == (
        '<span class="lanebook-badge lanebook-badge-pass">PASS</span> **a**\n'
        '| 3 | <span class="lanebook-badge lanebook-badge-fail">FAIL</span> | x |\n'
        '<span class="lanebook-badge lanebook-badge-dry-run">NOT OBSERVED</span>\n'
        '<span class="lanebook-badge lanebook-badge-skipped">SKIPPED</span> **s**\n'
        'a <span class="lanebook-badge lanebook-badge-warning">WARNING</span> here'
    )


def test_md_table_escapes_pipes_and_newlines():
    assert md_table(["a", "b"], [["x|y", "1\n2"]]) == "| a | b |\n|---|---|\n| x\\|y | 1 2 |\n"
