"""The built site's checks: internal links and anchors resolve, and nothing is loaded from the internet."""

from lanebook.site.bookcheck import check_site, css_loads, is_external, page_refs


def test_page_refs_sorts_loads_from_links_and_collects_anchors():
    refs = page_refs(
        '<html><head><link rel="stylesheet" href="_static/a.css"><script src="https://cdn.example/x.js"></script>'
        '<style>body { background: url("//fonts.example/f.woff2"); }</style></head>'
        '<body><h1 id="top">t</h1><a name="old"></a><a href="other.html#part">o</a>'
        '<img src="_images/p.png" srcset="_images/p2.png 2x" style="background:url(b.png)">'
        '<iframe src="http://site.example/"></iframe><a href="https://docs.example/">docs</a></body></html>'
    )
    assert refs.ids == {"top", "old"}
    assert refs.links == ["other.html#part", "https://docs.example/"]
    assert refs.loads == [
        "_static/a.css",
        "https://cdn.example/x.js",
        "//fonts.example/f.woff2",
        "_images/p.png",
        "_images/p2.png",
        "b.png",
        "http://site.example/",
    ]


def test_css_loads_and_external_urls():
    assert css_loads(
        "@import \"../basic.css\"; @import url(https://x.example/y.css); a { src: url('f.woff2?v=1#iefix') }"
    ) == ["../basic.css", "https://x.example/y.css", "f.woff2?v=1#iefix"]
    assert is_external("https://a") and is_external("//a/b") and is_external("HTTP://a")
    assert not is_external("_static/a.css") and not is_external("#top") and not is_external("data:image/png;base64,x")


def test_check_site_names_broken_links_missing_anchors_and_external_loads(tmp_path):
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "ok.css").write_text(
        '@import "missing.css"; body { background: url(https://x.example/i.png) }'
    )
    (tmp_path / "_static" / "macros.html").write_text('<a href="{{ pathto(x) }}">template, not a page</a>')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "page.html").write_text('<h2 id="here">x</h2><a href="../index.html#top">up</a>')
    (tmp_path / "index.html").write_text(
        '<h1 id="top">t</h1><link rel="stylesheet" href="_static/ok.css"><a href="sub/page.html#here">ok</a>'
        '<a href="sub/page.html#gone">anchor</a><a href="nowhere.html">missing</a><a href="#top">self</a>'
        '<a href="mailto:x@example.org">mail</a><a href="https://docs.example/">a link loads nothing</a>'
        '<script src="https://cdn.example/require.js"></script>'
    )
    assert check_site(tmp_path) == [
        "index.html loads https://cdn.example/require.js from the internet",
        "index.html: sub/page.html#gone has no anchor #gone",
        "index.html: nowhere.html is missing",
        "_static/ok.css: missing.css is missing",
        "_static/ok.css loads https://x.example/i.png from the internet",
    ]


def test_text_problems_name_the_page_and_line_of_what_a_page_must_not_say(tmp_path):
    """Only the article counts (the sidebar repeats every page's title); each line is named once per problem."""
    from lanebook.base.paths import REPO
    from lanebook.site.bookcheck import text_problems

    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "stop.html").write_text(
        '<nav>Stop the lane — not rehearsed yet</nav>\n<article class="bd-article">\n<h1>Stop the lane — not\n'
        "rehearsed yet</h1>\n<p>Not rehearsed yet.</p>\n</article>\n"
    )
    (tmp_path / "pitfalls.html").write_text(
        f"<article>\n<td>seed 000 (the recipe), pitfall 1</td>\n<td>linted {REPO}/params/twin.yaml</td>\n</article>\n"
    )
    (tmp_path / "clean.html").write_text(
        '<article><p>Rollback: <a href="sources.html#x">1M/6 canary live</a>, checkout ~/ds4-f-mia-anemll-1m6, '
        "/home/milo/ds4-f-wesche-keys-c12 on the lane, linted params/twin.yaml</p></article>"
    )
    problems = text_problems(tmp_path)
    assert problems == [
        "pitfalls.html line 2 says 'seed 0': name the write-up (lanebook.recipe.sources): "
        "seed 000 (the recipe), pitfall 1",
        f"pitfalls.html line 3 shows a local path ({REPO}): show it relative to the repository: "
        f"linted {REPO}/params/twin.yaml",
        "recipe/stop.html line 5 says 'not rehearsed': rehearse the runbook on the twin: Not rehearsed yet.",
    ]
