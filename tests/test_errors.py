"""A LanebookError is one line: the CLI prints it as it is and exits 2."""

from lanebook.base.errors import LanebookError, LaneError


def test_line_breaks_in_a_message_are_joined_into_one_line():
    problem = 'unacceptable character #x001f: special characters are not allowed\n  in "<unicode string>", position 0'
    assert str(LaneError(f"lane.yaml: not valid YAML ({problem})")) == (
        "lane.yaml: not valid YAML (unacceptable character #x001f: special characters are not allowed in "
        '"<unicode string>", position 0)'
    )
    assert str(LanebookError("a  b\r\n\r\nc\n")) == "a  b c"  # other spacing is kept
