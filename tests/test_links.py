"""Citations and ids as links: a write-up named by its title and linked to the Sources page, an id linked to its
row, and nothing touched in code, tags, links, addresses or the anchor itself."""

from lanebook.site.pages.links import anchor, defined_anchors, href, link_text

ANCHORS = {"P07": "pitfalls", "D13": "symptoms", "T01": "twin"}


def test_anchors_are_found_where_rows_define_them_the_first_page_winning():
    pages = {"pitfalls": f"| **{anchor('P07')}** |", "symptoms": f"| {anchor('P07')} | {anchor('D13')} |"}
    assert defined_anchors(pages) == {"P07": "pitfalls", "D13": "symptoms"}


def test_relative_links_between_built_pages():
    assert href("recipe/env", "pitfalls", "P07") == "../pitfalls.html#P07"
    assert href("pitfalls", "sources", "x") == "sources.html#x"
    assert href("audit/twin-1", "recipe/env", "y") == "../recipe/env.html#y"


def test_write_ups_and_ids_become_links():
    text = "| **P07** Memory | seed 000 (the recipe), pitfall 7; see D13, T01 and P99 |"
    assert link_text(text, "recipe/env", ANCHORS) == (
        '| **<a href="../pitfalls.html#P07">P07</a>** Memory | <a href="../sources.html#recipe-write-up">'
        "<em>Flash-0731 on 2× DGX Spark</em></a> (the recipe), pitfall 7; see "
        '<a href="../symptoms.html#D13">D13</a>, <a href="../twin.html#T01">T01</a> and P99 |'
    )


def test_code_tags_links_addresses_and_the_anchor_itself_are_left_alone():
    text = (
        f'{anchor("P07")} `P07 seed 000` [P07](x.md) <td class="P07"> https://x.example/P07 '
        '<a href="y.html">D13</a>\n```\nP07 seed 003\n```\nFP16 T01x'
    )
    assert link_text(text, "pitfalls", ANCHORS) == text


def test_a_directive_fence_holds_markdown_and_a_code_fence_does_not():
    text = "```{container} lanebook-wide\n| P07 |\n```\n```{code} sh\nP07\n```\n"
    assert link_text(text, "pitfalls", ANCHORS) == (
        '```{container} lanebook-wide\n| <a href="pitfalls.html#P07">P07</a> |\n```\n```{code} sh\nP07\n```\n'
    )


def test_a_nested_runs_record_links_to_its_page():
    from lanebook.site.pages.links import run_links

    text = "| gates | twin-1m6 | pass | | [abc](../twin-1m6/20261202T1-gates-abc.ipynb) | [x](../gone/y.ipynb)"
    docs = {"twin-1m6/20261202T1-gates-abc": "audit/twin-1m6-20261202T1-gates-abc"}
    assert run_links(text, "recipe/rollback", docs) == text.replace(
        "../twin-1m6/20261202T1-gates-abc.ipynb", "../audit/twin-1m6-20261202T1-gates-abc.ipynb"
    )
    assert "(twin-1m6-20261202T1-gates-abc.ipynb)" in run_links(text, "audit/twin-x", docs)


def test_fences_nest_in_a_directive_and_an_unclosed_code_fence_runs_to_the_end():
    from lanebook.site.pages.links import code_regions

    text = "```{container} w\n| a |\n```\n\nP07\n```{container} w\n````sh\nx\n````\n```\n~~~\nopen"
    code = [text[a:b] for a, b in code_regions(text)]
    assert code == ["````sh\nx\n````\n", "~~~\nopen"]
    assert "[P07]" not in link_text(text, "pitfalls", ANCHORS) and '#P07">P07</a>' in link_text(text, "x", ANCHORS)
