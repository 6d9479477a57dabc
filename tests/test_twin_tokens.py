"""The twin's tokens: pieces that join back into the text, and hashes that agree across processes."""

from __future__ import annotations

import subprocess
import sys

from lanebook.twin import tokens


def test_pieces_cut_words_digits_and_marks_and_join_back():
    assert tokens.pieces("Count 1234 tokens, please!") == ["Count", " 123", "4", " tokens", ",", " please", "!"]
    assert tokens.pieces("internationalization") == ["internat", "ionaliza", "tion"]
    text = "def parse(x):\n    return x * 2"
    assert "".join(tokens.pieces(text)) == text


def test_stable_hash_is_the_same_in_another_process():
    here = tokens.stable_hash("a", "b")
    code = "from lanebook.twin.tokens import stable_hash; print(stable_hash('a', 'b'))"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert str(here) == there
    assert tokens.stable_hash("a", "b") != tokens.stable_hash("ab")  # parts are separated, not concatenated
