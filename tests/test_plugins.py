"""What the twin adds (a lane launched when found down, its API known for a twin's) is found through the registry
the `lanebook.plugins` entry point fills (lanebook.lane.plugins); tests/test_layers.py checks that no product
module imports the twin."""

from lanebook.lane import plugins

TWIN = "lanebook.twin"


def test_the_twin_plugs_its_launcher_and_api_probe_into_the_registry():
    registry = plugins.load_registry()
    assert "twin" in registry.plugins
    twin_plugin = [f"{TWIN}.plugin"]
    assert [f.__module__ for f in registry.launchers] == [f.__module__ for f in registry.twin_probes] == twin_plugin
    assert plugins.serves_twin("http://127.0.0.1:9/v1") is False  # nothing listens on the discard port: no twin there
