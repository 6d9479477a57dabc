"""The Sources page: each write-up with its title, authors, date, what it covers and the lanes it set, under the
anchor every citation links to; never the shorthand the code uses."""

from lanebook.lane.params import lane_names, load_lane
from lanebook.recipe.sources import SHORTHAND, WRITE_UPS
from lanebook.site.pages.sources_page import sources_page


def test_each_write_up_is_named_under_its_anchor_with_the_lanes_it_set():
    page = sources_page([load_lane(name) for name in lane_names()])
    for w in WRITE_UPS:
        assert f"({w.anchor})=\n## {w.title}\n" in page and w.authors in page and w.dated in page
    recipe, canary = page.split("(canary-write-up)=")
    assert "`anemll-0731`" in recipe and "`twin`" in recipe
    assert "`anemll-1m6`" in canary and "`patch3-c12`" in canary and "`twin-1m6`" in canary
    assert not SHORTHAND.search(page)
