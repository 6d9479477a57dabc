"""tools/uv_install.py: pip's index and find-links settings, as `pip config list` prints them, handed to uv."""

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "uv_install.py"
spec = importlib.util.spec_from_file_location("uv_install", TOOL)
uv_install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uv_install)


def test_pip_settings_become_uv_options_and_a_missing_local_location_is_left_out(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    config = "\n".join(
        [
            ":env:.default-timeout='180'",
            f":env:.find-links='{wheels}'",
            "global.cert='/etc/ssl/certs/ca-certificates.crt'",
            f"global.extra-index-url='file://{tmp_path} file://{tmp_path}/missing https://mirror.example/simple'",
            "global.find-links='/somewhere/else'",  # the environment's setting wins, as in pip
        ]
    )
    locations = uv_install.pip_locations(config)
    assert locations == {
        "find-links": [str(wheels)],
        "extra-index-url": [f"file://{tmp_path}", "https://mirror.example/simple"],
    }
    assert uv_install.uv_arguments(locations) == [
        "--index-strategy",
        "unsafe-best-match",
        "--find-links",
        str(wheels),
        "--extra-index-url",
        f"file://{tmp_path}",
        "--extra-index-url",
        "https://mirror.example/simple",
    ]


def test_no_pip_configuration_leaves_uv_its_defaults():
    assert uv_install.uv_arguments(uv_install.pip_locations("")) == ["--index-strategy", "unsafe-best-match"]


def test_without_a_venv_it_says_how_to_call_it(capsys):
    assert uv_install.main([]) == 2
    assert "tools/uv_install.py UV VENV" in capsys.readouterr().err


def test_pips_certificate_bundle_reaches_uv_unless_the_environment_names_one(tmp_path):
    bundle = tmp_path / "proxy-ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    config = f"global.cert='{bundle}'\nglobal.find-links='/opt/wheels'"
    assert uv_install.pip_cert(config) == str(bundle)
    assert uv_install.uv_environment(config, {"PATH": "/bin"}) == {"PATH": "/bin", "SSL_CERT_FILE": str(bundle)}
    assert uv_install.uv_environment(config, {"SSL_CERT_FILE": "/mine.pem"}) == {"SSL_CERT_FILE": "/mine.pem"}
    assert uv_install.pip_cert(f"global.cert='{tmp_path}/missing.pem'") is None
