"""The served lanes page (lanebook.site.pages.watch_page) on a small series written as the watcher writes it
(helpers.watch_records): availability, the time not served, an incident's times, the speed waves and skipped
attempts, the link per rail and the pages, each to the exact value; the page shows them with the lane's figures
labelled, links the runs the book publishes, and shows none of the secrets planted in the records. The book built
with this series in its outputs is checked in tests/test_book.py."""

from __future__ import annotations

from helpers import watch_records as w
from lanebook.base.redact import redact
from lanebook.site.pages.watch_page import (
    WatchedLane,
    availability,
    downtime_s,
    duration,
    incident_times,
    link_series,
    page_counts,
    speed_points,
    stretches,
    watch_page,
)

T0, DAY = w.T0, w.DAY


def watched(figures_label: str = "twin") -> WatchedLane:
    return WatchedLane("twin", figures_label, w.probes(), w.incidents(), w.speed(), w.link(), w.pages(), w.state())


def test_stretches_availability_and_the_time_not_served():
    probes = w.probes()
    assert stretches(probes) == [
        (T0 - 8 * DAY, T0 + 120, True),
        (T0 + 120, T0 + 300, False),
        (T0 + 300, T0 + 540, True),
    ]
    assert availability(probes) == 8 / 11
    assert availability(probes, since=T0 + 540 - 7 * DAY) == 7 / 10  # the last 7 days leave out the early round
    assert (downtime_s(probes), downtime_s(probes, since=T0 + 180)) == (180.0, 120.0)
    assert (availability([]), downtime_s([]), stretches([])) == (None, 0, [])
    still_down = [{"t": 0.0, "served": True}, {"t": 10.0, "served": False}, {"t": 25.0, "served": False}]
    assert downtime_s(still_down) == 15.0  # an unserved run at the end counts to the last round


def test_an_incident_times_from_its_first_failed_round():
    engine, regression, link = w.incidents()
    assert incident_times(engine) == {
        "detected_after_s": 60.0,
        "repaired_after_s": 100.0,
        "served_again_after_s": 180.0,
        "open_for_s": 120.0,
    }
    assert incident_times(regression) == {
        "detected_after_s": None,
        "repaired_after_s": None,
        "served_again_after_s": None,
        "open_for_s": 100.0,
    }
    assert set(incident_times(link).values()) == {None}


def test_speed_waves_link_rails_and_pages():
    waves, skipped = speed_points(w.speed())
    assert [(p["t"] - T0, p["value"], p["below"], p["regression"]) for p in waves] == [
        (60, 80.0, False, False),
        (150, None, True, False),
        (330, 70.0, True, False),
        (360, 71.0, True, False),
        (400, 69.0, True, True),
        (500, 85.0, False, False),
    ]
    assert {(p["band_min"], p["band_median"]) for p in waves} == {(75.0, 82.0)}
    assert [s["t"] - T0 for s in skipped] == [30, 450]
    assert link_series(w.link()) == {
        "worker rocep1s0f0": [(T0 + 10, 95.1), (T0 + 540, 95.1)],
        "worker roceP2p1s0f0": [(T0 + 10, 94.0), (T0 + 540, 13.2)],
    }
    assert page_counts(w.pages()) == {
        "opened": (1, 0),
        "repaired": (1, 1),
        "served-again": (1, 0),
        "regression": (1, 0),
    }
    assert [duration(s) for s in (None, 42, 185, 7440, 3 * DAY + 7200)] == ["—", "42.0 s", "3 min 5 s", "2 h 4 min",
                                                                           "3 d 2 h"]  # fmt: skip


def test_the_page_shows_the_figures_labelled_links_runs_and_no_secret():
    published = {w.RUN_IDS[1]: "audit/twin-20261207T000200Z-launch-w0000002"}
    text, pictures = watch_page([watched()], ["anemll-0731", "patch3-c12"], published)
    assert list(pictures) == ["watch-twin.png"] and pictures["watch-twin.png"].startswith(b"\x89PNG")
    assert "```{figure} watch-twin.png" in text
    assert '<span class="lanebook-badge lanebook-badge-twin">TWIN</span> Every figure here is a twin figure' in text
    assert "Not watched (nothing under `outputs/watch/`): `anemll-0731`, `patch3-c12`." in text
    # availability: the whole series and its last 7 days, the time not served
    assert "| whole series (2026-11-29 00:00:00 → 2026-12-07 00:09:00) | 11 | 8 | 72.73 % | 3 min 0 s |" in text
    assert "| last 7 days of the series (to its last round) | 10 | 7 | 70.00 % | 3 min 0 s |" in text
    # the incident: cause, the doctor's finding and fix, the restart and its runs (linked where published), times
    assert "| 2026-12-07 00:03:00 | orphaned worker |" in text and "| restart passed | 3 min 0 s | 3 |" in text
    assert "- **Doctor:** P16 Head dies mid-TP" in text and "relaunch the lane: stop every rank, then launch" in text
    assert (
        "stop `w0000001` pass, launch [w0000002](audit/twin-20261207T000200Z-launch-w0000002.ipynb) pass, gates "
        "`w0000003` pass" in text
    )
    assert "detected 2026-12-07 00:03:00 (after 1 min 0 s, 2 rounds); repaired 2026-12-07 00:03:40" in text
    assert "served again 2026-12-07 00:05:00 (after 3 min 0 s)" in text
    assert (
        "carries 13.2 Gb/s\n- **Times (UTC):** detected 2026-12-07 00:09:00; closed —\n- **Fix:** power-cycle both"
        in text
    )
    # pages, speed, link
    assert "5 page(s) sent" not in text and "4 page(s) sent, 1 attempt(s) failed" in text
    assert (
        "6 wave(s) of one stream against the lane's stored C1 band, 4 below its minimum (1 with no figure: its request "
        "failed), 1 judged a regression" in text
    )
    assert "2 attempt(s) skipped: clients are being served: requests running 1, waiting 0 (2×)" in text
    assert "| 2026-12-07 00:06:40 | 69.0 | 75.0 | 82.0 |" in text and "REGRESSION" in text
    assert "NCCL bus bandwidth: not measured (no all_reduce_perf output)." in text
    assert "3 attempt(s), 2 measured; not measured 1× (the last: link: the worker did not answer)" in text
    assert "| worker | `roceP2p1s0f0` | 13.2 | 9000 |\n" in text and "| L01 | error |" in text
    # nothing planted is shown, nor anything the redactor would hide; where pages go is never shown
    for secret in w.SECRETS:
        assert secret not in text, secret
    assert redact(text) == text and "hooks.example.invalid" not in text
    assert "Authorization: Bearer [REDACTED]" in text  # the failure is shown, its credential is not


def test_a_real_lane_is_labelled_real_and_a_book_with_no_watch_says_so():
    text, _ = watch_page([watched("real lane")], [], {})
    assert '<span class="lanebook-badge lanebook-badge-real">REAL LANE</span>' in text
    assert "twin figure" not in text and "(real lane figures" in text
    text, pictures = watch_page([], ["twin"], {})
    assert pictures == {} and "No lane has been watched yet." in text and "`twin`" in text
    empty = WatchedLane("twin", "twin")
    text, pictures = watch_page([empty], [], {})
    assert pictures == {} and "No probe round recorded." in text and "No incident." in text
